// Package lua holds the Lua helpers the Redis lockers' scripts share and
// assembles scripts from embedded chunks.
package lua

import (
	_ "embed"
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Decimal is decimal.lua: exact arithmetic and comparison on canonical
// decimal strings, the server clock, and the counter key's "c" or "c:d"
// form.
//
//go:embed decimal.lua
var Decimal string

// Source concatenates the named chunks: "decimal" is [Decimal], any other
// name the file name + ".lua" of fsys. It panics on a missing chunk: the
// scripts are assembled once, at package initialisation.
func Source(fsys fs.FS, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		if n == "decimal" {
			b.WriteString(Decimal)
			continue
		}
		src, err := fs.ReadFile(fsys, n+".lua")
		if err != nil {
			panic("lua: " + err.Error())
		}
		b.Write(src)
	}
	return b.String()
}

// Script is [Source] as a go-redis script.
func Script(fsys fs.FS, names ...string) *redis.Script {
	return redis.NewScript(Source(fsys, names...))
}
