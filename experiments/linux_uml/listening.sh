# Sourced by kernel-tcp (on this host) and guest-init (in the guest, which sees this file over
# hostfs). `wait_listening PORT PID`: returns once a TCP socket listens on PORT, or 1 if process
# PID is gone first. Shell builtins only: an exec costs tens of ms in the guest, and the host
# runs the engine in real time meanwhile.
wait_listening() {
    local hex row table
    hex=$(printf ':%04X ' "$1")
    while kill -0 "$2" 2>/dev/null; do
        for table in /proc/net/tcp /proc/net/tcp6; do
            [ -r "$table" ] || continue
            while read -r row; do
                [[ $row == *"$hex"*" 0A "* ]] && return 0
            done < "$table"
        done
    done
    return 1
}
