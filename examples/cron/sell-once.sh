#!/bin/sh
# sell-once.sh: sell one unit of $SKU at the inventory service $INVENTORY,
# under the lock fenceguard holds: the sale carries the lock's fencing
# token, and the service refuses it (409) once a newer holder has been there.
#
#   INVENTORY=http://127.0.0.1:8080 SKU=lamp \
#     fenceguard run --lock redis://127.0.0.1:6379 --key sku:lamp --ttl 5s -- ./sell-once.sh
#
# fenceguard sets FENCING_HEADER and FENCING_TOKEN. HOLD (optional) names a
# file: while it exists, the job waits before it sells, holding the lock.
set -eu
: "${INVENTORY:?set INVENTORY, e.g. http://127.0.0.1:8080}" "${SKU:?set SKU, e.g. lamp}"
: "${FENCING_TOKEN:?run me under fenceguard run}" "${FENCING_HEADER:=X-Fencing-Token}"
me="sell-once[$$] token $FENCING_TOKEN"

# request METHOD PATH [JSON]: one request that carries the token. Prints the
# answer's body; any answer but 2xx is said on stderr, with the service's
# problem details (409: a newer holder was there, or sold out), and fails.
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

if [ -n "${HOLD:-}" ] && [ -e "$HOLD" ]; then
	echo "$me: holding the lock while $HOLD exists"
	while [ -e "$HOLD" ]; do sleep 0.1; done
fi

request POST "/items/$SKU/sell" >/dev/null # one fenced statement: stock - 1
echo "$me: sold one $SKU"
