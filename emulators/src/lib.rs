//! The calibration service's emulation substrate: a Mahimahi-compatible link emulator.
//!
//! The pure core ([`stage`], [`link`], [`queue`], [`loss`], [`delay`]) moves packets through
//! time that is passed in, in integer milliseconds, exactly as Mahimahi's link shells do; it is
//! tested in virtual time. Around it sit the real-time pieces: network namespaces and TUN
//! devices ([`netns`]), endpoint processes ([`endpoint`]), logs ([`logs`]) and the
//! deadline-driven event loop ([`realtime`]).

pub mod config;
pub mod delay;
pub mod endpoint;
pub mod error;
pub mod flows;
pub mod link;
pub mod logs;
pub mod loss;
pub mod netns;
pub mod packet;
pub mod queue;
pub mod realtime;
pub mod stage;
pub mod trace;
