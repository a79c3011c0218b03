//! The engine's errors: each carries a one-line message for a person and an exit status.

use std::fmt;

/// What went wrong, by who can fix it (the exit status tells scripts apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad command line or input file: exit status 2.
    Input,
    /// The host cannot run the emulator (not root, no TUN device...): exit status 3.
    Environment,
    /// Something failed while running: exit status 1.
    Runtime,
}

#[derive(Debug, Clone)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

impl Error {
    pub fn input(message: impl Into<String>) -> Self {
        Error { kind: Kind::Input, message: message.into() }
    }
    pub fn environment(message: impl Into<String>) -> Self {
        Error { kind: Kind::Environment, message: message.into() }
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Error { kind: Kind::Runtime, message: message.into() }
    }
    pub fn exit_status(&self) -> i32 {
        match self.kind {
            Kind::Input => 2,
            Kind::Environment => 3,
            Kind::Runtime => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
