#!/usr/bin/env bash
# check-tracked.sh fails when the index tracks build output: an executable
# binary (ELF, Mach-O, PE, or any file whose content is not text and that has
# the executable bit) or a file larger than 1 MiB. Generated code and images
# that belong in the tree are named in ALLOWED below, each with its reason.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"

limit=$((1024 * 1024))
# ALLOWED: paths that may be large or binary, and why.
#   docs/dashboard.png                 the dashboard's picture in the README
#   proto/idmint-v1.baseline.binpb     the released schema, for buf breaking
#   rpcapi/gen/*                       generated from proto/ (make generate)
allowed() {
	case $1 in
	docs/dashboard.png | proto/idmint-v1.baseline.binpb | rpcapi/gen/*) return 0 ;;
	esac
	return 1
}

bad=0
# -z: names as they are, whatever characters they hold; the index's own
# mode and size, so an untracked change in the work tree changes nothing.
while IFS= read -r -d '' line; do
	meta=${line%%$'\t'*}
	path=${line#*$'\t'}
	mode=${meta%% *}
	[[ $mode == 120000 || $mode == 160000 ]] && continue # symlink, submodule
	allowed "$path" && continue
	object=$(awk '{print $2}' <<<"$meta")
	size=$(git cat-file -s "$object")
	if ((size > limit)); then
		echo "tracked file larger than 1 MiB: $path ($size bytes)"
		bad=1
		continue
	fi
	# head closes the pipe early: its SIGPIPE is not a failure here.
	magic=$(set +o pipefail; git cat-file blob "$object" | head -c 4 | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | cafebabe | 4d5a*)
		echo "tracked executable binary: $path"
		bad=1
		continue
		;;
	esac
	# -a: on data it takes for binary, GNU grep reads a NUL as a line's end,
	# so that \x00 never matches without it (scripts/checktracked_test.go).
	if [[ $mode == 100755 ]] && (set +o pipefail; git cat-file blob "$object" | head -c 8000 | LC_ALL=C grep -qaP '\x00'); then
		echo "tracked executable file that is not text: $path"
		bad=1
	fi
done < <(git ls-files -s -z)

if ((bad)); then
	echo "check-tracked: remove build output with git rm --cached, and cover it in .gitignore" >&2
	exit 1
fi
