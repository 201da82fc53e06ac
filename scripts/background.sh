# Background jobs of scripts/install.sh, sourced by it: the llama-cpp-python wheel build and LIBERO's interpreter run
# at nice 19, so that the installs in the foreground, and the real-time tests that scripts/test.sh
# runs while they finish, keep the CPU they need. A job holds an exclusive lock on $VENV/.bg-NAME.lock while it runs
# and leaves its exit status in $VENV/.bg-NAME.rc, so that a later run of install.sh, not only the one that started
# it, can wait for it.

bg_start() {  # bg_start NAME LOG CMD...: run CMD (a program, not a shell function) in the background, output to LOG
  local name=$1 log=$2 fd
  shift 2
  rm -f "$VENV/.bg-$name.rc"
  exec {fd}>"$VENV/.bg-$name.lock"
  flock -x "$fd"  # taken before the job starts: a bg_wait that comes at once still waits
  # all of the job's output goes to LOG: a reader of this shell's output (a pipe) is not kept waiting for the job
  ( set +e; nice -n 19 "$@"; echo $? > "$VENV/.bg-$name.rc" ) > "$log" 2>&1 < /dev/null &
  exec {fd}>&-  # the job holds the lock now; later children of this shell must not
}

bg_running() {  # bg_running NAME: whether the job was started and has not been waited for
  [ -f "$VENV/.bg-$1.lock" ]
}

bg_wait() {  # bg_wait NAME: wait for the job; return its exit status (0 when none was started, 1 when it left none)
  local lock="$VENV/.bg-$1.lock" rc="$VENV/.bg-$1.rc" status
  [ -f "$lock" ] || return 0
  flock -x "$lock" true
  status=$(cat "$rc" 2>/dev/null || echo 1)  # no status: the job was killed (or the machine restarted)
  rm -f "$lock" "$rc"
  return "$status"
}
