package redislock

import (
	"testing"

	"github.com/fenceguard/fenceguard/harness/redisserver"
)

func TestSlotOfIsRedisClusterKeySlot(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"", "a", "b", "fg:lock:{a}", "fg:lock:{{order:7}:a}", "{}", "{}x", "x{}y{z}",
		"{order:7}:b", "123456789", "fenceguard:lock:{job:report}:tok", "\xff{\x00}",
	} {
		if got, want := slotOf(name), redisserver.KeySlot(name); int(got) != want {
			t.Errorf("slotOf(%q) = %d, Redis's slot %d", name, got, want)
		}
	}
}
