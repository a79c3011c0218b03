//! The calibration service's emulation substrate: a Mahimahi-compatible link emulator.
//!
//! The pure core ([`stage`], [`link`], [`queue`], [`loss`], [`delay`]) moves packets through
//! time that is passed in, in integer milliseconds, exactly as Mahimahi's link shells do; it is
//! tested in virtual time. [`ferry`] puts each stage behind a process of its own with its own
//! millisecond clock and poll loop, as Mahimahi's shells are, so that senders see Mahimahi's
//! timing (the default; the idealised single-clock [`stage::Pipeline`] remains as an option).
//! Around it sit the real-time pieces: network namespaces and TUN devices ([`netns`]), endpoint
//! processes ([`endpoint`]), logs ([`logs`]) and the deadline-driven event loop ([`realtime`]),
//! which reports how late it wrote packets out against the model's times ([`lateness`]).
//! [`mahimahi`] and [`tap`] run the same endpoints through the user's real Mahimahi shells
//! instead, measured by packet taps at both ends.

pub mod config;
pub mod delay;
pub mod endpoint;
pub mod error;
pub mod ferry;
pub mod flows;
pub mod lateness;
pub mod link;
pub mod logs;
pub mod loss;
pub mod mahimahi;
pub mod netns;
pub mod packet;
pub mod queue;
pub mod realtime;
pub mod stage;
pub mod tap;
pub mod trace;
