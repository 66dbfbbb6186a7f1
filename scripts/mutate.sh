#!/usr/bin/env bash
# scripts/mutate.sh (make mutate): mutation testing of idmint's core. For each
# mutation in scripts/mutations.txt it copies the source tree, applies the
# mutation, runs the tests named for it, and reports whether they failed
# (killed) or passed (SURVIVED). Exits 1 if any mutation survives or cannot
# be applied. Not part of CI: run it after changing the core or its tests.
#
#   scripts/mutate.sh                  all mutations
#   scripts/mutate.sh NAME...          only these
#   MUTATE_GOFLAGS='-race' scripts/mutate.sh
#   MUTATE_CHECK=1 scripts/mutate.sh   only check that every mutation applies
#                                      (each old text occurs once); no tests
#
# Tests that need PostgreSQL find it as `make test` does (IDMINT_TEST_PG,
# IDMINT_TEST_DATABASE_URL, ...). The source tree is never modified.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list=$root/scripts/mutations.txt
GO=${GO:-go}
timeout=${MUTATE_TIMEOUT:-10m}
read -r -a goflags <<<"${MUTATE_GOFLAGS:-}"

work=$(mktemp -d "${TMPDIR:-/tmp}/idmint-mutate.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The tree as it is now (committed or not), without .git.
(cd "$root" && git ls-files -co --exclude-standard -z) |
	(cd "$root" && tar --null -T - -cf -) | tar -C "$work" -xf -

# replace FILE: replaces $OLD by $NEW in FILE; fails unless OLD occurs once.
replace() {
	perl -e '
		local $/; my $f = shift; open(my $in, "<", $f) or die "$f: $!";
		my $s = <$in>; close $in;
		my ($o, $n) = ($ENV{OLD}, $ENV{NEW});
		my $c = () = $s =~ /\Q$o\E/g;
		exit 3 if $c != 1;
		$s =~ s/\Q$o\E/$n/;
		open(my $out, ">", $f) or die "$f: $!"; print $out $s; close $out;
	' "$1"
}

# Parse the list into parallel arrays; subs[i] holds "old\x1fnew\x1e" pairs.
names=() whats=() tests=() files=() subs=()
i=-1 field=
while IFS= read -r line || [[ -n $line ]]; do
	if [[ $line == $'\t'* && -n $field ]]; then
		case $field in
		old) cur_old+=$'\n'"$line" ;;
		new) cur_new+=$'\n'"$line" ;;
		esac
		continue
	fi
	if [[ $field == new ]]; then
		subs[i]+="$cur_old"$'\x1f'"$cur_new"$'\x1e'
		field=
	fi
	case $line in
	'#'* | '') field= ;;
	name:\ *) i=$((i + 1)); names[i]=${line#name: }; subs[i]= ;;
	what:\ *) whats[i]=${line#what: } ;;
	test:\ *) tests[i]=${line#test: } ;;
	file:\ *) files[i]=${line#file: } ;;
	old:\ *) cur_old=${line#old: } field=old ;;
	new:\ *) cur_new=${line#new: } field=new ;;
	*) echo "mutations.txt: cannot parse: $line" >&2; exit 2 ;;
	esac
done <"$list"
if [[ $field == new ]]; then subs[i]+="$cur_old"$'\x1f'"$cur_new"$'\x1e'; fi

selected=("$@")
chosen=()
for i in "${!names[@]}"; do
	if ((${#selected[@]} == 0)) || [[ " ${selected[*]} " == *" ${names[i]} "* ]]; then
		chosen+=("$i")
	fi
done

# run_tests SPEC LOG: runs one test spec in the work tree. A spec that
# starts with -C DIR runs in the module at DIR (deploy/helm is a module of
# its own), as go's -C would.
# A spec "npm: FILE PATTERN" runs the TypeScript client's tests instead
# (clients/ts: dist/test/FILE, the tests whose names match PATTERN), with
# the tree's node_modules (npm ci when it has none).
# A spec "py: MODULE PATTERN" runs the Python client's unittest module
# (clients/python/tests/MODULE.py, the tests whose names contain PATTERN),
# with $IDMINT_BIN when set, else the idmint built from the work tree.
# A spec "mvn: TESTS" runs the Java client's tests (clients/java: Maven
# offline, -Dtest=TESTS) against the work tree's idmint, beside a PostgreSQL
# server of the test harness (testkit/cmd/withpostgres) unless
# IDMINT_TEST_DATABASE_URL names one, as make test-java does.
run_tests() {
	if [[ $1 == py:* ]]; then
		local module pattern
		read -r module pattern <<<"${1#py: }"
		(cd "$work/clients/python" && python3 -m unittest -v -k "$pattern" "tests.$module") >>"$2" 2>&1
		return
	fi
	if [[ $1 == mvn:* ]]; then
		(cd "$work" && $GO build -o clients/java/target/idmint ./cmd/idmint && $GO build -o clients/java/target/withpostgres ./testkit/cmd/withpostgres &&
			cd clients/java && if [[ -n ${IDMINT_TEST_DATABASE_URL:-} ]]; then pg=(); else pg=(target/withpostgres -env IDMINT_TEST_DATABASE_URL); fi &&
			IDMINT_BIN=$PWD/target/idmint "${pg[@]}" mvn -o -B -ntp test -Dtest="${1#mvn: }") >>"$2" 2>&1
		return
	fi
	if [[ $1 == npm:* ]]; then
		local file pattern
		read -r file pattern <<<"${1#npm: }"
		(cd "$work/clients/ts" &&
			if [[ -d $root/clients/ts/node_modules ]]; then ln -sfn "$root/clients/ts/node_modules" node_modules; else npm ci --no-audit --no-fund; fi &&
			npm run --silent build && node --test --test-concurrency=1 --test-name-pattern="$pattern" "dist/test/$file") >>"$2" 2>&1
		return
	fi
	local -a args
	read -r -a args <<<"$1"
	local dir=.
	if [[ ${args[0]:-} == -C ]]; then dir=${args[1]} args=("${args[@]:2}"); fi
	(cd "$work/$dir" && $GO test "${goflags[@]}" -count=1 -timeout "$timeout" "${args[@]}") >>"$2" 2>&1
}

# Baseline: every test spec passes on the unmutated tree, or a failure
# under a mutation would prove nothing.
declare -A baseline=()
check_only=${MUTATE_CHECK:-0}
for i in "${chosen[@]}"; do
	[[ $check_only == 1 ]] && break
	spec=${tests[i]}
	[[ -n ${baseline[$spec]:-} ]] && continue
	baseline[$spec]=1
	start=$SECONDS
	if ! run_tests "$spec" "$work/baseline.log"; then
		echo "baseline: go test $spec FAILS without any mutation; fix that first:" >&2
		tail -n 30 "$work/baseline.log" >&2
		exit 1
	fi
	printf '%-28s %4ss  passes unmutated: go test %s\n' baseline "$((SECONDS - start))" "$spec"
done

results=()
failed=0
for i in "${chosen[@]}"; do
	name=${names[i]}
	file=$work/${files[i]}
	cp "$file" "$file.orig"
	status=
	IFS=$'\x1e' read -r -d '' -a pairs <<<"${subs[i]}" || true
	for pair in "${pairs[@]}"; do
		[[ $pair == *$'\x1f'* ]] || continue
		if ! OLD=${pair%%$'\x1f'*} NEW=${pair#*$'\x1f'} replace "$file"; then
			status="NOT APPLICABLE (the old text does not occur exactly once in ${files[i]})"
		fi
	done
	read -r -a args <<<"${tests[i]}"
	log=$work/$name.log
	start=$SECONDS
	if [[ -z $status && $check_only == 1 ]]; then
		status="applies (not run)"
	elif [[ -z $status ]]; then
		pkgs=() dir=.
		[[ ${args[0]:-} == -C ]] && dir=${args[1]}
		for a in "${args[@]}"; do [[ $a == ./* ]] && pkgs+=("$a"); done
		if [[ ${tests[i]} != npm:* && ${tests[i]} != py:* && ${tests[i]} != mvn:* ]] && ! (cd "$work/$dir" && $GO vet "${pkgs[@]}") >"$log" 2>&1; then
			status="DOES NOT COMPILE"
		elif run_tests "${tests[i]}" "$log"; then
			status="SURVIVED"
		else
			killers=$({ grep -oE -- '--- FAIL: [^ ]+|\[ERROR\]   [A-Za-z]+Test\.[A-Za-z]+' "$log" | awk '{print $NF}'; grep -oE -- '^(FAIL|ERROR): [^ ]+' "$log" | awk '{print $2}'; } | sort -u | head -3 | paste -sd, - || true)
			status="killed by ${killers:-a failing test run}"
		fi
	fi
	mv "$file.orig" "$file"
	printf '%-28s %4ss  %s\n' "$name" "$((SECONDS - start))" "$status"
	results+=("$name: $status")
	if [[ $status != killed* && $status != applies* ]]; then
		failed=1
		echo "    ${whats[i]}; its test run: $log" >&2
		tail -n 20 "$log" >&2 || true
	fi
done

echo
if [[ $check_only == 1 ]]; then
	((failed)) && echo "mutations: ${#results[@]}, some do not apply" && exit 1
	echo "mutations: ${#results[@]}, all apply"
	exit 0
fi
survivors=$(printf '%s\n' "${results[@]}" | grep -vc ': killed' || true)
echo "mutations: ${#results[@]}, killed: $((${#results[@]} - survivors)), not killed: $survivors"
if ((failed)); then
	trap - EXIT
	echo "(work tree kept for inspection: $work)"
	exit 1
fi
