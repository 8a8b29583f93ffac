# bash completion for memtap: its commands, each command's options, the values an option
# takes (export --format, plan --gpu-mem, run --allocator, ...), the bundled policies
# after --policy, the recorder's option keys after -O, and trace files (memtap traces,
# PyTorch snapshots, RMM logs; Lua scripts for memtap lua). The words come from the
# memtap being completed (memtap --complete), so they follow the installed version.

_memtap_files()
{
	local ext found=0 w
	for ext in "$@"; do
		while IFS= read -r w; do
			COMPREPLY+=("$w")
			found=1
		done < <(compgen -f -X "!*.$ext" -- "$cur")
	done
	while IFS= read -r w; do
		COMPREPLY+=("$w")
	done < <(compgen -d -- "$cur")
	# nothing of those kinds here: any file
	if [ $found = 0 ] && [ ${#COMPREPLY[@]} = 0 ]; then
		while IFS= read -r w; do
			COMPREPLY+=("$w")
		done < <(compgen -f -- "$cur")
	fi
	compopt -o filenames 2>/dev/null
}

_memtap()
{
	local memtap=${COMP_WORDS[0]} cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local sub="" i positional=0 w
	COMPREPLY=()
	# --name=value: bash splits the words at '='
	if [ "$prev" = "=" ] && [ "$COMP_CWORD" -gt 1 ]; then
		prev=${COMP_WORDS[COMP_CWORD-2]}
	elif [ "$cur" = "=" ]; then
		cur=""
	fi
	[ "$COMP_CWORD" -gt 1 ] && sub=${COMP_WORDS[1]}
	if [ -z "$sub" ]; then
		COMPREPLY=($(compgen -W "$("$memtap" --complete commands 2>/dev/null | cut -f1) --help --version" -- "$cur"))
		return 0
	fi
	for ((i = 2; i < COMP_CWORD; i++)); do
		if [ "$sub" = run ] && [ "${COMP_WORDS[i]}" = "--" ]; then
			# memtap run ... -- COMMAND [ARGS]: the command to record, then its arguments
			if [ $((i + 1)) = "$COMP_CWORD" ]; then
				COMPREPLY=($(compgen -c -- "$cur"))
			else
				while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -f -- "$cur")
				compopt -o filenames 2>/dev/null
			fi
			return 0
		fi
		case ${COMP_WORDS[i]} in
		-* | =) ;;
		*) positional=$((positional + 1)) ;;
		esac
	done
	case "$sub:$prev" in
	run:--policy)
		COMPREPLY=($(compgen -W "$("$memtap" --complete policies 2>/dev/null | sort -u)" -- "$cur"))
		_memtap_files lua
		return 0
		;;
	*:-o | *:--output | *:--html | *:--deepspeed)
		# options that name a file to write or read: any file
		while IFS= read -r w; do COMPREPLY+=("$w"); done < <(compgen -f -- "$cur")
		compopt -o filenames 2>/dev/null
		return 0
		;;
	run:-O | run:--option)
		COMPREPLY=($(compgen -S = -W "$("$memtap" --complete keys 2>/dev/null)" -- "$cur"))
		compopt -o nospace 2>/dev/null
		return 0
		;;
	esac
	# the values of an option that has a list of them: from the table the command checks
	if [[ $prev == --* ]]; then
		w=$("$memtap" --complete values "$sub" "$prev" 2>/dev/null)
		if [ -n "$w" ]; then
			COMPREPLY=($(compgen -W "$w" -- "$cur"))
			return 0
		fi
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$("$memtap" --complete options "$sub" 2>/dev/null)" -- "$cur"))
		return 0
	fi
	case $sub in
	lua)
		# the script first, then the traces it reads
		if [ $positional = 0 ]; then _memtap_files lua; else _memtap_files trace pickle pkl csv; fi
		;;
	run | version) ;;
	*) _memtap_files trace pickle pkl csv ;;
	esac
	return 0
}
complete -F _memtap memtap
