//! The processes at each end of the path (a scheme's sender and receiver, or a shell).
//!
//! Each endpoint runs as the child of a small init process that is PID 1 of its own PID
//! namespace, inside the side's network namespace. Killing that init ends every process the
//! endpoint started, however it daemonized; and the init dies with the engine (parent-death
//! signal), so even a SIGKILLed engine leaves nothing behind.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Which namespace an endpoint runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideName {
    Sender,
    Receiver,
}

impl SideName {
    pub fn as_str(self) -> &'static str {
        match self {
            SideName::Sender => "sender",
            SideName::Receiver => "receiver",
        }
    }
}

/// What to run, where and when.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointSpec {
    pub side: SideName,
    /// Seconds after the emulation starts.
    pub start: f64,
    /// Program and arguments (`/bin/sh -c CMD` for a command string).
    pub argv: Vec<String>,
    /// Interactive: keeps the terminal's process group and ignores the terminal's SIGINT.
    pub interactive: bool,
}

impl EndpointSpec {
    pub fn shell_command(side: SideName, start: f64, command: &str) -> Self {
        EndpointSpec { side, start, argv: vec!["/bin/sh".into(), "-c".into(), command.into()], interactive: false }
    }

    pub fn describe(&self) -> String {
        if self.argv.len() == 3 && self.argv[0] == "/bin/sh" && self.argv[1] == "-c" {
            self.argv[2].clone()
        } else {
            self.argv.join(" ")
        }
    }
}

/// How an endpoint ended, in the shell's convention (128 + signal for a signal).
pub fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::input(format!("argument contains a NUL byte: {s:?}")))
}

/// Start `spec` in the network namespace `netns`; returns the init's pid (in our namespace).
pub fn spawn(spec: &EndpointSpec, netns: RawFd, env: &[(String, String)]) -> Result<libc::pid_t> {
    // Everything the child needs is prepared here: between clone and exec it may only make
    // async-signal-safe system calls.
    let mode = if spec.interactive { "interactive" } else { "job" };
    let mut argv = vec![cstring("calibrate-link")?, cstring("__init")?, cstring(mode)?, cstring("--")?];
    for arg in &spec.argv {
        argv.push(cstring(arg)?);
    }
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envs: Vec<CString> = Vec::new();
    let overridden: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    for (key, value) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if !overridden.contains(&key.as_ref()) {
            envs.push(cstring(&format!("{key}={}", value.to_string_lossy()))?);
        }
    }
    for (key, value) in env {
        envs.push(cstring(&format!("{key}={value}"))?);
    }
    let mut env_ptrs: Vec<*const libc::c_char> = envs.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let exe = c"/proc/self/exe";

    // clone() without a new stack behaves like fork(), plus the new PID namespace.
    let flags = (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong;
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(Error::environment(format!(
            "cannot start the {} endpoint in a new PID namespace: {}",
            spec.side.as_str(),
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::setns(netns, libc::CLONE_NEWNET) != 0 {
                libc::_exit(126);
            }
            unblock_all_signals();
            libc::execve(exe.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    Ok(pid as libc::pid_t)
}

/// The init of an endpoint's PID namespace (`calibrate-link __init MODE -- PROGRAM ARGS...`):
/// runs the program, passes termination signals on to it, reaps orphans, and exits with the
/// program's status, at which point the kernel kills whatever is left in the namespace.
pub fn run_init(args: &[String]) -> i32 {
    let (mode, program) = match args {
        [mode, dashes, program @ ..] if dashes == "--" && !program.is_empty() => (mode.as_str(), program),
        _ => {
            eprintln!("calibrate-link __init: internal use only");
            return 2;
        }
    };
    let interactive = mode == "interactive";
    let signals = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGCHLD];
    let signalfd = match block_into_signalfd(&signals) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("calibrate-link: {e}");
            return 126;
        }
    };
    let mut command = Command::new(&program[0]);
    command.args(&program[1..]);
    if !interactive {
        // Its own process group, so a signal reaches everything the command started.
        command.process_group(0);
    }
    // The init reads its signals from a signalfd, so it blocks them; a program must start with
    // none blocked, or the SIGTERM that stops it stays pending and only the SIGKILL after the
    // grace period ends it (a Pantheon wrapper or iperf would then keep sending into a stopped
    // link). Command does not reset the mask it inherits.
    unsafe {
        // pthread_sigmask returns its error number; it does not set errno
        command.pre_exec(|| match unblock_all_signals() {
            0 => Ok(()),
            status => Err(std::io::Error::from_raw_os_error(status)),
        });
    }
    let child = match command.spawn() {
        Ok(child) => child.id() as libc::pid_t,
        Err(e) => {
            eprintln!("calibrate-link: cannot run {:?}: {e}", program[0]);
            return 127;
        }
    };
    // Once asked to stop, wait for every process in the namespace to finish (a scheme may
    // still be writing its results); the engine's grace period bounds the wait.
    let mut stopping = false;
    let mut status = None;
    loop {
        let Some(signal) = read_signal(signalfd) else { continue };
        if signal == libc::SIGCHLD {
            loop {
                let mut wait_status = 0;
                let pid = unsafe { libc::waitpid(-1, &mut wait_status, libc::WNOHANG) };
                if pid == child {
                    status = Some(exit_code(wait_status));
                }
                if pid > 0 {
                    continue;
                }
                // pid 0: others still run; -1 (ECHILD): the namespace is empty.
                if let Some(code) = status {
                    if pid < 0 || !stopping {
                        return code;
                    }
                }
                break;
            }
        } else if !(interactive && (signal == libc::SIGINT || signal == libc::SIGQUIT)) {
            // (An interactive program already got the terminal's SIGINT/SIGQUIT itself.)
            // From PID 1, kill(-1) reaches every other process of this PID namespace.
            stopping = true;
            unsafe { libc::kill(-1, signal) };
        }
    }
}

/// Unblock every signal of the calling thread (async-signal-safe: used between fork and exec).
/// Returns pthread_sigmask's status.
fn unblock_all_signals() -> libc::c_int {
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    }
}

/// The next signal from a signalfd, or None if none could be read (non-blocking and empty).
pub fn read_signal(signalfd: RawFd) -> Option<i32> {
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    let n = unsafe { libc::read(signalfd, &mut info as *mut _ as *mut libc::c_void, size) };
    (n == size as isize).then_some(info.ssi_signo as i32)
}

/// Block `signals` for this thread (and threads it creates) and read them from a signalfd.
pub fn block_into_signalfd(signals: &[i32]) -> std::io::Result<RawFd> {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        let status = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if status != 0 {
            return Err(std::io::Error::from_raw_os_error(status));
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }
}
