# Sourced by the PCC reference wrappers (pantheon_2017/pcc, pantheon_2018/pcc_experimental).
# With PCC_SRAND=SEED set, `pcc_srand_gdb` checks the seed and writes a gdb script whose one
# breakpoint gives the program's `srand` that seed in place of the clock, so that it draws what the
# port draws with the same PCC_SRAND; its path is in $srand_gdb, removed on the harness's SIGTERM.
pcc_srand_gdb() {
    case "$PCC_SRAND" in
        ''|*[!0-9]*|?????????????*) ;;
        *) if [ "$PCC_SRAND" -le 4294967295 ]; then
               srand_gdb=$(mktemp /tmp/pcc-srand-XXXXXX.gdb)
               trap 'rm -f "$srand_gdb"; kill -TERM $(jobs -p) 2>/dev/null; wait; exit 0' TERM INT
               # pending: a dynamically linked program's srand is in libc, loaded after the start
               # decimal for gdb, which reads a leading 0 as octal (the port reads PCC_SRAND=010 as 10)
               printf 'set breakpoint pending on\nbreak srand\ncommands\nsilent\nset $rdi = %s\ncontinue\nend\n' \
                   "$((10#$PCC_SRAND))" >"$srand_gdb"
               return
           fi ;;
    esac
    echo "PCC_SRAND=$PCC_SRAND is not a seed for srand: give an integer from 0 to 4294967295, or unset it" >&2
    exit 2
}
