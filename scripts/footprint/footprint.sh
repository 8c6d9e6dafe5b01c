#!/usr/bin/env bash
# footprint.sh: what a user pays for importing fenceguard, measured.
#
# For each pair of consumer programs under _consumers/ — one using a
# fenceguard integration, one doing the same with the peer library users
# would otherwise pick — it makes a scratch module in a temporary directory,
# points the fenceguard modules at this checkout (a replace per module, as a
# user of a local clone would), runs go mod tidy, and measures: the modules
# in the build list (go list -m all), the go.sum lines, the go line tidy
# settles on, and the binary size plain and stripped (-s -w). The peer is
# given the same versions of the libraries both use (pgx, go-redis, …), so
# the comparison is of what each adds on top; modules the fenceguard program
# needs at a higher version than the peer are listed as "raised".
#
# Usage: scripts/footprint/footprint.sh [pair ...]   (default: every pair)
# Output: a Markdown table on stdout (docs/footprint.md keeps the latest).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

# pair: fenceguard-consumer peer-consumer modules-both-use
pairs=(
  "redis-pg bsm-pgx github.com/jackc/pgx/v5 github.com/redis/go-redis/v9"
  "etcd etcd-mutex go.etcd.io/etcd/client/v3"
  "zk zk-lock github.com/go-zookeeper/zk"
  "redlock redsync github.com/redis/go-redis/v9"
  "prom prom-plain github.com/prometheus/client_golang"
  "otel otel-plain go.opentelemetry.io/otel"
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
trap 'rm -rf "$work"' EXIT

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
  for a in $anchors; do
    v=$(versions "$fg" | awk -v m="$a" '$1 == m { print $2 }')
    [ -n "$v" ] && (cd "$work/$peer" && go mod edit -require="$a@$v")
  done
  (cd "$work/$peer" && go mod tidy >/dev/null 2>&1)
  read -r n1 s1 g1 b1 bs1 <<<"$(measure "$fg")"
  read -r n2 s2 g2 b2 bs2 <<<"$(measure "$peer")"
  raised=$(join <(versions "$fg" | sort) <(versions "$peer" | sort) |
    awk '$2 != $3 { print $1, $2, $3 }' |
    while read -r m v1 v2; do
      hi=$(printf '%s\n%s\n' "$v1" "$v2" | sort -V | tail -1)
      [ "$hi" = "$v1" ] && printf '%s %s (peer %s); ' "${m##*/}" "$v1" "$v2"
    done)
  bad=$(forbidden "$fg" | tr '\n' ' ')
  [ -n "$bad" ] && raised="${raised}FORBIDDEN: $bad"
  echo "| $fg | $n1 | $s1 | $g1 | $(mb "$b1") / $(mb "$bs1") MB | $(ratio "$n1" "$n2") | $(ratio "$b1" "$b2") / $(ratio "$bs1" "$bs2") | ${raised:-none} |"
  echo "| ↳ $peer | $n2 | $s2 | $g2 | $(mb "$b2") / $(mb "$bs2") MB | | | |"
done
