//! The event loop's readiness and timers: epoll, one timerfd armed at absolute
//! `CLOCK_MONOTONIC` instants (nanosecond resolution, unlike epoll's millisecond timeout),
//! and a signalfd for SIGINT and SIGTERM.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

/// Token of the timer.
pub const TOKEN_TIMER: u64 = u64::MAX;
/// Token of the signal descriptor.
pub const TOKEN_SIGNAL: u64 = u64::MAX - 1;

/// One readiness report.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    /// The token given at registration.
    pub token: u64,
    /// Readable (or hung up).
    pub readable: bool,
    /// Writable.
    pub writable: bool,
}

/// epoll + timerfd + signalfd.
pub struct Poller {
    epoll: Epoll,
    timer: TimerFd,
    signals: SignalFd,
    armed: Option<u64>,
    events: Vec<EpollEvent>,
}

fn err(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Poller {
    /// Creates the poller and blocks SIGINT and SIGTERM for this thread (they arrive
    /// through the signalfd instead).
    pub fn new() -> io::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(err)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(err)?;
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGINT);
        mask.add(Signal::SIGTERM);
        mask.thread_block().map_err(err)?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(err)?;
        epoll
            .add(
                timer.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_TIMER),
            )
            .map_err(err)?;
        epoll
            .add(
                signals.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_SIGNAL),
            )
            .map_err(err)?;
        Ok(Self {
            epoll,
            timer,
            signals,
            armed: None,
            events: vec![EpollEvent::empty(); 64],
        })
    }

    /// Registers `fd` for readability (and writability when `writable`).
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64, writable: bool) -> io::Result<()> {
        self.epoll
            .add(fd, EpollEvent::new(flags(writable), token))
            .map_err(err)
    }

    /// Registers `fd` edge-triggered for readability and writability: an event each time
    /// data arrives and each time the kernel frees some of its send buffer (a datagram
    /// left), as long as the socket is writable then. The owner reads until `WouldBlock`.
    pub fn add_edge(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT | EpollFlags::EPOLLET;
        self.epoll
            .add(fd, EpollEvent::new(flags, token))
            .map_err(err)
    }

    /// Changes whether `fd` is also watched for writability.
    pub fn modify(&self, fd: BorrowedFd<'_>, token: u64, writable: bool) -> io::Result<()> {
        let mut ev = EpollEvent::new(flags(writable), token);
        self.epoll.modify(fd, &mut ev).map_err(err)
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.epoll.delete(fd).map_err(err)
    }

    /// Arms the timer at `deadline_ns` (`CLOCK_MONOTONIC`), or disarms it.
    pub fn arm(&mut self, deadline_ns: Option<u64>) -> io::Result<()> {
        if deadline_ns == self.armed {
            return Ok(());
        }
        self.armed = deadline_ns;
        match deadline_ns {
            Some(ns) => {
                // A zero expiry would disarm the timer: fire at 1 ns at the earliest.
                let ns = ns.max(1);
                let ts = TimeSpec::new((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64);
                self.timer
                    .set(
                        Expiration::OneShot(ts),
                        TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                    )
                    .map_err(err)
            }
            None => self.timer.unset().map_err(err),
        }
    }

    /// Waits for readiness or the timer, up to `max_wait_ms` (-1: no limit). Appends what
    /// is ready to `out`; the timer and signals come as their tokens.
    pub fn wait(&mut self, out: &mut Vec<Ready>, max_wait_ms: i32) -> io::Result<()> {
        let timeout = if max_wait_ms < 0 {
            EpollTimeout::NONE
        } else {
            EpollTimeout::try_from(max_wait_ms).unwrap_or(EpollTimeout::ZERO)
        };
        let n = match self.epoll.wait(&mut self.events, timeout) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => 0,
            Err(e) => return Err(err(e)),
        };
        for ev in &self.events[..n] {
            let token = ev.data();
            let f = ev.events();
            if token == TOKEN_TIMER {
                // Drain the expiration count; a spurious wake-up is harmless.
                let mut buf = [0u8; 8];
                // SAFETY: reading 8 bytes into a valid 8-byte buffer.
                let _ = unsafe {
                    libc::read(self.timer.as_fd().as_raw_fd(), buf.as_mut_ptr().cast(), 8)
                };
                self.armed = None;
            }
            out.push(Ready {
                token,
                readable: f
                    .intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR),
                writable: f.contains(EpollFlags::EPOLLOUT),
            });
        }
        Ok(())
    }

    /// The signal that arrived, if any (SIGINT or SIGTERM).
    pub fn take_signal(&mut self) -> Option<Signal> {
        match self.signals.read_signal() {
            Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
            _ => None,
        }
    }
}

fn flags(writable: bool) -> EpollFlags {
    if writable {
        EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
    } else {
        EpollFlags::EPOLLIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;

    #[test]
    fn armed_timer_fires_at_its_deadline_not_before() {
        let mut p = Poller::new().unwrap();
        let start = monotonic_ns();
        p.arm(Some(start + 3_000_000)).unwrap();
        let mut out = Vec::new();
        while !out.iter().any(|r: &Ready| r.token == TOKEN_TIMER) {
            p.wait(&mut out, 100).unwrap();
        }
        let waited = monotonic_ns() - start;
        assert!(waited >= 3_000_000, "woke after {waited} ns");
        assert!(waited < 50_000_000, "woke after {waited} ns");
    }
}
