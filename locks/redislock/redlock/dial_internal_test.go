package redlock

import (
	"reflect"

	"github.com/redis/go-redis/v9"
)

// OneDial returns o with go-redis's dial retries turned off where the
// version in use has them. Options.DialerRetries is newer than the oldest
// go-redis this module supports, so it is set by name: the tests must build
// against both.
func OneDial(o redis.Options) *redis.Options {
	if f := reflect.ValueOf(&o).Elem().FieldByName("DialerRetries"); f.IsValid() && f.CanSet() {
		f.SetInt(1)
	}
	return &o
}
