#!/usr/bin/env bash
# scripts/fuzz.sh (make fuzz): runs each fuzz target for FUZZTIME.
#
# Go's fuzzing coordinator can end a clean run with a bare "context deadline
# exceeded" when a worker is mid-input as -fuzztime runs out (golang/go#75804,
# fixed after go1.26), with no failing input written. Such a run is run once
# more; a run that writes a failing input, or fails twice, fails the target.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
targets=(
	"./httpapi FuzzRequest" "./httpapi FuzzAuth" "./httpapi FuzzLoginCookie" "./token FuzzParse"
	"./httpapi FuzzServer_Segments" "./httpapi FuzzDecodeBody" "./segment FuzzBuffer_TopOfInt64"
	"./internal/leafexport FuzzParse" "./region FuzzShares"
)
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	for try in 1 2; do
		out=$(mktemp)
		echo "go test -run '^\$' -fuzz '^$name\$' -fuzztime $FUZZTIME $pkg"
		$GO test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$out"
		status=${PIPESTATUS[0]}
		if ((status == 0)); then
			rm -f "$out"
			break
		fi
		if ((try == 1)) && grep -q '^    context deadline exceeded$' "$out" && ! grep -q 'Failing input written' "$out"; then
			echo "fuzz.sh: $name ended on the coordinator's deadline with no failing input (golang/go#75804): running it again"
			rm -f "$out"
			continue
		fi
		rm -f "$out"
		echo "fuzz.sh: $name failed"
		exit 1
	done
done
