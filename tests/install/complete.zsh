# zsh -f complete.zsh FPATH_DIR OUT 'memtap re': what zsh's completion system offers for
# that command line, one word a line in OUT, typed into an interactive zsh in a pty
# (compinit over FPATH_DIR first). compadd is wrapped to note every match added; TAB is
# bound to a widget that completes and then writes OUT.done, which is waited for.
zmodload zsh/zpty || exit 2
dir=$1 out=$2 line=$3
zpty z zsh -f -i
zpty -w z "PROMPT=''; RPROMPT=''; unsetopt beep; fpath=(${(q)dir} \$fpath)"
zpty -w z "autoload -Uz compinit && compinit -u -D"
zpty -w z "zstyle ':completion:*' list-prompt ''; zstyle ':completion:*' menu no; LISTMAX=100000"
zpty -w z "compadd() { local -a m; builtin compadd -O m \"\$@\"; print -rl -- \$m >> ${(q)out}; builtin compadd \"\$@\"; }"
zpty -w z "mt-tab() { zle complete-word; print -r -- done > ${(q)out}.done }; zle -N mt-tab; bindkey '^I' mt-tab"
zpty -w z "print -r -- ready > ${(q)out}.ready"
# at most a minute for each, on a loaded machine
for i in {1..600}; do [[ -e $out.ready ]] && break; sleep 0.1; done
zpty -w -n z "$line"$'\t'
for i in {1..600}; do [[ -e $out.done ]] && break; sleep 0.1; done
zpty -d z
[[ -e $out.done ]]
