# zsh -f complete.zsh FPATH_DIR OUT 'memtap re': what zsh's completion system offers for
# that command line, one word a line in OUT, typed into an interactive zsh in a pty
# (compinit over FPATH_DIR first). compadd is wrapped to note every match added.
zmodload zsh/zpty || exit 2
dir=$1 out=$2 line=$3
zpty z zsh -f -i
zpty -w z "PROMPT=''; RPROMPT=''; unsetopt beep; fpath=(${(q)dir} \$fpath)"
zpty -w z "autoload -Uz compinit && compinit -u -D"
zpty -w z "zstyle ':completion:*' list-prompt ''; zstyle ':completion:*' menu no; LISTMAX=100000"
zpty -w z "compadd() { local -a m; builtin compadd -O m \"\$@\"; print -rl -- \$m >> ${(q)out}; builtin compadd \"\$@\"; }"
zpty -w z "print -r -- READY > ${(q)out}.ready"
for i in {1..100}; do [[ -e $out.ready ]] && break; sleep 0.1; done
zpty -w -n z "$line"$'\t'
for i in {1..50}; do [[ -s $out ]] && break; sleep 0.1; done
sleep 0.3
zpty -d z
