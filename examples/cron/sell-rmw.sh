#!/bin/sh
# sell-rmw.sh: sell one unit of $SKU at the inventory service $INVENTORY the
# way many jobs write: read the stock, then write it back less one. Both
# requests carry the lock's fencing token; the read claims the item, so once
# a newer holder has read it, this job's write is refused (409).
#
#   INVENTORY=http://127.0.0.1:8080 SKU=lamp \
#     fenceguard run --lock redis://127.0.0.1:6379 --key sku:lamp --ttl 5s -- ./sell-rmw.sh
#
# fenceguard sets FENCING_HEADER and FENCING_TOKEN. HOLD (optional) names a
# file: while it exists, the job waits between its read and its write — where
# a pause (GC, swap, a frozen VM, SIGSTOP) does harm.
set -eu
: "${INVENTORY:?set INVENTORY, e.g. http://127.0.0.1:8080}" "${SKU:?set SKU, e.g. lamp}"
: "${FENCING_TOKEN:?run me under fenceguard run}" "${FENCING_HEADER:=X-Fencing-Token}"
me="sell-rmw[$$] token $FENCING_TOKEN"

# request METHOD PATH [JSON]: one request that carries the token. Prints the
# answer's body; any answer but 2xx is said on stderr, with the service's
# problem details (409: a newer holder was there), and fails.
request() {
	resp=$(curl -sS -X "$1" -H "$FENCING_HEADER: $FENCING_TOKEN" -H 'Content-Type: application/json' \
		${3:+-d} ${3:+"$3"} -w '\n%{http_code}' "$INVENTORY$2") || return
	status=$(printf '%s\n' "$resp" | tail -n 1)
	body=$(printf '%s\n' "$resp" | sed '$d')
	case $status in
	2??) printf '%s\n' "$body" ;;
	*) echo "$me: $1 $2 refused: $status $body" >&2; return 1 ;;
	esac
}

item=$(request GET "/items/$SKU") # {"sku":"lamp","stock":30}
stock=$(printf '%s\n' "$item" | sed -n 's/.*"stock": *\([0-9][0-9]*\).*/\1/p')
echo "$me: read $SKU: stock $stock"
if [ "$stock" -le 0 ]; then
	echo "$me: $SKU is sold out" >&2
	exit 1
fi

if [ -n "${HOLD:-}" ] && [ -e "$HOLD" ]; then
	echo "$me: holding the lock while $HOLD exists"
	while [ -e "$HOLD" ]; do sleep 0.1; done
fi

request PUT "/items/$SKU/stock" "{\"stock\":$((stock - 1))}" >/dev/null
echo "$me: wrote $SKU: stock $((stock - 1))"
