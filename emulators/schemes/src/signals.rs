//! Termination: SIGTERM or SIGINT ends an endpoint with status 0 at once.
//!
//! Pantheon stops a scheme by SIGTERM to its process group and expects it gone. Endpoints
//! block in `read`, `write`, `ppoll` or inside a tokio runtime, so instead of threading a
//! cancellation flag through every loop, the two signals are blocked in the main thread
//! before any other thread exists (every later thread inherits the mask) and one thread
//! waits for them with `sigwait`; when one arrives it prints the summary and exits the
//! process. Exit latency is one thread wake-up.

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

/// Must be called before any thread is spawned. `on_exit` runs once, on the signal
/// thread, right before `exit(0)`.
pub fn exit_on_termination<F>(on_exit: F) -> Result<(), String>
where
    F: FnOnce() + Send + 'static,
{
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
        .map_err(|e| format!("cannot block SIGTERM/SIGINT: {e}"))?;
    std::thread::Builder::new()
        .name("termination".into())
        .spawn(move || {
            // sigwait only fails for an invalid set; ours is valid, so any return is a signal.
            let _ = set.wait();
            on_exit();
            std::process::exit(0);
        })
        .map_err(|e| format!("cannot start the termination thread: {e}"))?;
    Ok(())
}
