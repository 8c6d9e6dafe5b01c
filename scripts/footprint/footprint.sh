#!/usr/bin/env bash
# footprint.sh: what a user pays for importing fenceguard, measured.
#
# For each pair of consumer programs under _consumers/ — one using a
# fenceguard integration, one doing the same with the peer library users
# would otherwise pick — it makes a scratch module in a temporary directory,
# points the fenceguard modules at this checkout (a replace per module, as a
# user of a local clone would), requires the fenceguard modules the program
# imports (as "go get" would), runs go mod tidy, and measures: the modules
# in the build list (go list -m all), the go.sum lines, the go line tidy
# settles on, and the binary size plain and stripped (-s -w).
#
# The peer first resolves on its own, with only the pair's anchors (the
# libraries both use: pgx, go-redis, the etcd client, …) at fenceguard's
# versions: modules the fenceguard program needs at a higher version than
# that are listed as "raised". For the sizes, the peer then gets
# fenceguard's version of every module both use, so that what is compared
# is what each adds on top of the same libraries.
#
# Then, the service of issue 16: a program pinned at grpc v1.64.0, otel
# v1.24.0, prometheus v1.19.0, x/sys v0.20.0, go-redis v9.5.1, pgx v5.5.0
# and go 1.23, built once as it is and once with fenceguard's Redis locker,
# guard and PostgreSQL column mode added: the modules that had to move are
# what fenceguard costs an existing service.
#
# Usage: scripts/footprint/footprint.sh [pair ...]   (default: every pair)
# Output: Markdown on stdout (docs/footprint.md keeps the latest).
# FOOTPRINT_KEEP=1 keeps the scratch modules (their directory is printed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

# pair: fenceguard-consumer peer-consumer modules-both-use
pairs=(
  "redis-pg bsm-pgx github.com/jackc/pgx/v5 github.com/redis/go-redis/v9"
  "etcd etcd-mutex go.etcd.io/etcd/"
  "zk zk-lock github.com/go-zookeeper/zk"
  "zk-bare zk-lock github.com/go-zookeeper/zk"
  "redlock redsync github.com/redis/go-redis/v9"
  "prom prom-plain github.com/prometheus/"
  "otel otel-plain go.opentelemetry.io/otel go.opentelemetry.io/otel/"
  "grpc grpc-plain google.golang.org/grpc"
)
if [ $# -gt 0 ]; then
  want=" $* "
  sel=()
  for p in "${pairs[@]}"; do
    case "$want" in *" ${p%% *} "*) sel+=("$p") ;; esac
  done
  pairs=("${sel[@]}")
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fenceguard-footprint-XXXXXX")
if [ -n "${FOOTPRINT_KEEP:-}" ]; then echo "footprint: scratch modules in $work" >&2; fi
trap '[ -n "${FOOTPRINT_KEEP:-}" ] || rm -rf "$work"' EXIT

# Every module of this checkout, as "path dir".
mods=()
while IFS= read -r gm; do
  d=$(dirname "$gm")
  p=$(cd "$d" && go mod edit -json | sed -n 's/^\t\t"Path": "\(.*\)",\{0,1\}$/\1/p' | head -1)
  mods+=("$p $d")
done < <(find "$root" -name go.mod -not -path '*/_consumers/*' -not -path '*/testdata/*' | sort)

# setup NAME: a scratch module with _consumers/NAME/main.go in $work/NAME.
setup() {
  local name=$1 dir=$work/$1
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$here/_consumers/$name/main.go" "$dir/"
  (
    cd "$dir"
    go mod init example.com/consumer/"$name" >/dev/null 2>&1
    # Start low: tidy raises the go line to what the dependencies need.
    go mod edit -go=1.21
    for m in "${mods[@]}"; do
      go mod edit -replace="${m%% *}=${m#* }"
    done
    # Require the fenceguard modules the program imports up front, as "go
    # get" of them would, so that tidy resolves the program's own imports
    # of pgx, go-redis, … at the versions fenceguard asks for rather than
    # at the newest.
    for imp in $(grep -o '"github.com/fenceguard/fenceguard[^"]*"' main.go | tr -d '"'); do
      best=""
      for m in "${mods[@]}"; do
        p=${m%% *}
        case "$imp/" in "$p"/*) [ ${#p} -gt ${#best} ] && best=$p ;; esac
      done
      go mod edit -require="$best@v0.0.0-00010101000000-000000000000"
    done
  )
}

# measure NAME: "modules sumlines goline plain stripped"
measure() {
  local dir=$work/$1
  (
    cd "$dir"
    go build -o bin . && go build -ldflags='-s -w' -o bin-s .
    local n s g
    n=$(go list -m all | wc -l)
    s=$(wc -l <go.sum 2>/dev/null || echo 0)
    g=$(go mod edit -json | sed -n 's/^\t"Go": "\(.*\)",$/\1/p')
    echo "$n $s $g $(stat -c %s bin) $(stat -c %s bin-s)"
  )
}

mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# versions NAME: "path version" of every module in the build list.
versions() { (cd "$work/$1" && go list -m -f '{{.Path}} {{.Version}}' all); }

# forbidden NAME: test-only or demo packages a library user must never get.
forbidden() {
  (cd "$work/$1" && go list -deps . | grep -E 'fenceguard/(integration|examples|internal/lockbench)|testcontainers|toxiproxy|porcupine|go.etcd.io/etcd/server|goleak|pgregory.net/rapid|text/template|html/template' || true)
}

echo "| program | modules | go.sum lines | go line | binary (plain / -s -w) | modules ÷ peer | binary ÷ peer (plain / -s -w) | raised above the peer |"
echo "|---|---:|---:|---|---:|---:|---:|---|"
for p in "${pairs[@]}"; do
  read -r fg peer anchors <<<"$p"
  setup "$fg"
  (cd "$work/$fg" && go mod tidy >/dev/null 2>&1) || { echo "footprint: go mod tidy failed for $fg" >&2; (cd "$work/$fg" && go mod tidy); exit 1; }
  setup "$peer"
  (cd "$work/$peer" && go mod tidy >/dev/null 2>&1)
  # Give the peer the versions of the shared libraries fenceguard's modules
  # require, so the comparison is of what each adds on top of them.
  # (An anchor names a module, or with a trailing / every module under it:
  # the etcd client's modules go together.)
  for a in $anchors; do
    versions "$fg" | awk -v a="$a" '$1 == a || (a ~ /\/$/ && index($1, a) == 1) { print $1 "@" $2 }' |
      while read -r mv; do (cd "$work/$peer" && go mod edit -require="$mv"); done
  done
  (cd "$work/$peer" && go mod tidy >/dev/null 2>&1)
  versions "$peer" | sort >"$work/$peer.natural"
  # For the sizes, the peer then gets fenceguard's version of every module
  # both programs use, so that a different protobuf or x/sys does not count
  # as fenceguard's cost (or saving).
  versions "$fg" | while read -r m v; do
    if grep -q "^$m " "$work/$peer.natural"; then (cd "$work/$peer" && go mod edit -require="$m@$v"); fi
  done
  (cd "$work/$peer" && go mod tidy >/dev/null 2>&1)
  read -r n1 s1 g1 b1 bs1 <<<"$(measure "$fg")"
  read -r n2 s2 g2 b2 bs2 <<<"$(measure "$peer")"
  raised=$(join <(versions "$fg" | sort) "$work/$peer.natural" |
    awk '$2 != $3 { print $1, $2, $3 }' |
    while read -r m v1 v2; do
      hi=$(printf '%s\n%s\n' "$v1" "$v2" | sort -V | tail -1)
      if [ "$hi" = "$v1" ]; then printf '%s %s (peer %s); ' "${m##*/}" "$v1" "$v2"; fi
    done)
  bad=$(comm -23 <(forbidden "$fg" | sort) <(forbidden "$peer" | sort) | tr '\n' ' ')
  if [ -n "$bad" ]; then raised="${raised}FORBIDDEN: $bad"; fi
  echo "| $fg | $n1 | $s1 | $g1 | $(mb "$b1") / $(mb "$bs1") MB | $(ratio "$n1" "$n2") | $(ratio "$b1" "$b2") / $(ratio "$bs1" "$bs2") | ${raised:-none} |"
  echo "| ↳ $peer | $n2 | $s2 | $g2 | $(mb "$b2") / $(mb "$bs2") MB | | | |"
done

if [ $# -gt 0 ]; then exit 0; fi
pins="google.golang.org/grpc@v1.64.0 go.opentelemetry.io/otel@v1.24.0 github.com/prometheus/client_golang@v1.19.0 golang.org/x/sys@v0.20.0 github.com/redis/go-redis/v9@v9.5.1 github.com/jackc/pgx/v5@v5.5.0"
for s in service service-fenced; do
  setup "$s"
  (cd "$work/$s" && go mod edit -go=1.23 && for p in $pins; do go mod edit -require="$p"; done && go mod tidy >/dev/null 2>&1)
done
echo
echo "The service of issue 16 (go 1.23; grpc v1.64.0, otel v1.24.0, prometheus v1.19.0, x/sys v0.20.0, go-redis v9.5.1, pgx v5.5.0), adding fenceguard's Redis locker, guard and PostgreSQL column mode:"
echo
echo "| | modules | go line | binary (plain / -s -w) |"
echo "|---|---:|---|---:|"
for s in service service-fenced; do
  read -r n _ g b bs <<<"$(measure "$s")"
  echo "| $s | $n | $g | $(mb "$b") / $(mb "$bs") MB |"
done
echo
echo "Modules whose version had to move:"
echo
join <(versions service | sort) <(versions service-fenced | sort) | awk '$2 != $3 { printf "- %s %s → %s\n", $1, $2, $3 }'
comm -13 <(versions service | awk '{print $1}' | sort) <(versions service-fenced | awk '{print $1}' | sort) | grep -v '^example.com' | sed 's/^/- added: /'
