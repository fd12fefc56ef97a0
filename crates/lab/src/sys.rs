//! Thin wrappers over the Linux system calls the lab needs: clocks, precise sleeps,
//! socket options, epoll, timerfd, signalfd, and running a closure inside a network
//! namespace.
//!
//! Everything here is Linux-only and unsafe inside; the wrappers check every return
//! value and turn it into an [`io::Error`].

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h): a packet socket does not see the
/// frames sent on its interface.
pub(crate) const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_QDISC_BYPASS`: frames sent on a packet socket skip the qdisc.
pub(crate) const PACKET_QDISC_BYPASS: libc::c_int = 20;
/// `SO_TIMESTAMPNS` (asm-generic/socket.h, 64-bit time on x86-64 and arm64).
pub(crate) const SO_TIMESTAMPNS: libc::c_int = 35;

/// One datagram or frame from `fd` without blocking, with its kernel receive time
/// (`SO_TIMESTAMPNS`: ns of `CLOCK_REALTIME`, 0 if the kernel attached none) and, from an
/// IPv4 socket, its sender. `Ok(None)`: nothing pending (or interrupted).
pub(crate) fn recv_stamped(
    fd: RawFd,
    buf: &mut [u8],
) -> io::Result<Option<(usize, Option<std::net::SocketAddrV4>, u64)>> {
    // SAFETY: msghdr and sockaddr_storage are POD; every pointer refers to a local alive
    // for the call, and the CMSG macros walk the control buffer the kernel filled.
    unsafe {
        let mut from: libc::sockaddr_storage = mem::zeroed();
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut ctrl = [0u64; 16];
        let mut msg: libc::msghdr = mem::zeroed();
        msg.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&ctrl);
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT);
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        let mut ts = 0u64;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                ts = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        let sender = (i32::from(from.ss_family) == libc::AF_INET).then(|| {
            let a: libc::sockaddr_in =
                std::ptr::read_unaligned((&from as *const libc::sockaddr_storage).cast());
            std::net::SocketAddrV4::new(
                std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )
        });
        Ok(Some((n as usize, sender, ts)))
    }
}

/// Turns a `-1` return into the thread's `errno`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Same as [`cvt`] for `ssize_t` returns.
pub(crate) fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec; the clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in nanoseconds. Shared by every network namespace, so times taken
/// in different namespaces (and processes) can be subtracted.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds (what kernel packet timestamps are in).
pub(crate) fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, read as a tight pair: converts a kernel
/// receive timestamp (realtime) to the monotonic clock.
pub(crate) fn realtime_offset_ns() -> i128 {
    let m1 = mono_ns();
    let r = realtime_ns();
    let m2 = mono_ns();
    i128::from(r) - i128::from(m1 / 2 + m2 / 2)
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Sleeps until the monotonic time `deadline_ns`: `clock_nanosleep` to `spin_ns`
/// before it, then spins on the clock. A sleeping thread on a VM wakes tens of µs to
/// ~1 ms late (baselines.md); the spin hides that when it is shorter than `spin_ns`.
pub fn sleep_until(deadline_ns: u64, spin_ns: u64) {
    let wake = deadline_ns.saturating_sub(spin_ns);
    while mono_ns() < wake {
        let ts = timespec(wake);
        // SAFETY: valid timespec, null remainder (absolute sleeps do not use it).
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r == libc::EINTR && stop_requested() {
            return;
        }
        if r != 0 && r != libc::EINTR {
            break;
        }
    }
    while mono_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Sets this thread's timer slack (default 50 µs) so that timers fire on time.
pub(crate) fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long; no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// Puts the calling thread in `SCHED_FIFO` at `priority` (1..=99); returns the policy
/// and priority it had, to restore with [`set_scheduler`]. Real-time priority keeps a
/// timing-critical thread from waiting behind CPU-bound work (builds, benchmarks) on a
/// shared machine; the kernel's RT throttling (95 % by default) still bounds it.
pub fn set_realtime(priority: i32) -> io::Result<(i32, i32)> {
    // SAFETY: plain syscalls on the calling thread (tid 0 = self).
    unsafe {
        let old_policy = cvt(libc::sched_getscheduler(0))?;
        let mut old: libc::sched_param = mem::zeroed();
        cvt(libc::sched_getparam(0, &mut old))?;
        set_scheduler(libc::SCHED_FIFO, priority)?;
        Ok((old_policy, old.sched_priority))
    }
}

/// `sched_setscheduler` on the calling thread.
pub fn set_scheduler(policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: plain syscall on the calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, policy, &param) }).map(drop)
}

/// `setsockopt` with a plain-old-data value.
pub(crate) fn setsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` readable bytes.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `setsockopt` with a byte string (e.g. `TCP_CONGESTION`).
pub(crate) fn setsockopt_bytes(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &[u8],
) -> io::Result<()> {
    // SAFETY: `value` points to `value.len()` readable bytes.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt` into a plain-old-data value; returns the length the kernel wrote.
pub(crate) fn getsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` points to `len` writable bytes of a POD type.
    cvt(unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

/// Creates a socket with `SOCK_CLOEXEC`.
pub(crate) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    proto: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the returned fd is owned by the `OwnedFd`.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: `fd` was just returned by socket() and is not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The path of a named network namespace (as `ip netns add` creates it).
pub(crate) fn netns_path(name: &str) -> String {
    format!("/run/netns/{name}")
}

/// Runs `f` on a new thread that has first joined the network namespace `ns`; the
/// calling thread's namespace is untouched. Sockets created by `f` stay in `ns` for
/// their whole life, whichever thread uses them later.
pub fn in_netns<T, F>(ns: &str, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        enter_netns(&ns)?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("netns worker thread panicked"))?
}

/// Moves the calling thread into the network namespace `ns` for good (use it on a
/// thread of its own).
pub fn enter_netns(ns: &str) -> io::Result<()> {
    let path = netns_path(ns);
    let c = CString::new(path.clone()).map_err(io::Error::other)?;
    // SAFETY: valid NUL-terminated path.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })
        .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    // SAFETY: `fd` is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: joining a network namespace only affects this thread.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) })
        .map_err(|e| io::Error::new(e.kind(), format!("setns {path}: {e}")))?;
    Ok(())
}

/// Whether a process with this pid exists and has not exited (a zombie waiting for
/// its parent counts as gone).
pub(crate) fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // The state is the first field after the parenthesised command name.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => false,
    }
}

/// Sends `sig` to `pid`, ignoring a process that is already gone.
pub(crate) fn kill(pid: i32, sig: libc::c_int) {
    if pid > 0 {
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid, sig) };
    }
}

/// An epoll instance (level-triggered), keyed by a `u64` token per fd.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is ours.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watches `fd` for input.
    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is valid for the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(drop)
    }

    /// Waits up to `timeout_ms` (-1: forever, 0: poll) and fills `tokens` with the
    /// ready tokens. A signal interrupting the wait is not an error.
    pub(crate) fn wait(&self, tokens: &mut Vec<u64>, timeout_ms: i32) -> io::Result<()> {
        tokens.clear();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        // SAFETY: `events` has room for 32 entries.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::EINTR) {
                Ok(())
            } else {
                Err(e)
            };
        }
        tokens.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

/// A `CLOCK_MONOTONIC` timerfd armed at absolute instants.
#[derive(Debug)]
pub(crate) struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` is ours.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Arms the timer at the monotonic instant `at_ns` (0 disarms it).
    pub(crate) fn arm_at(&self, at_ns: u64) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: timespec(0),
            // A zero it_value disarms; an instant in the past fires at once.
            it_value: timespec(at_ns.max(u64::from(at_ns != 0))),
        };
        // SAFETY: `spec` is valid; no old value requested.
        cvt(unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })
        .map(drop)
    }

    /// Consumes a pending expiry, if any.
    pub(crate) fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `buf`; EAGAIN is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A signalfd for SIGINT and SIGTERM (the signals are blocked for this thread, so
/// call it before spawning threads that must inherit the mask).
#[derive(Debug)]
pub(crate) struct SignalFd {
    fd: OwnedFd,
}

impl SignalFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: sigset manipulation on a local; sigprocmask on this thread.
        unsafe {
            let mut set: libc::sigset_t = mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            cvt(libc::pthread_sigmask(
                libc::SIG_BLOCK,
                &set,
                std::ptr::null_mut(),
            ))?;
            let fd = cvt(libc::signalfd(
                -1,
                &set,
                libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
            ))?;
            Ok(Self {
                fd: OwnedFd::from_raw_fd(fd),
            })
        }
    }

    /// Whether a signal is pending (consumes it).
    pub(crate) fn take(&self) -> bool {
        // SAFETY: signalfd_siginfo is POD; read at most its size.
        let mut info: libc::signalfd_siginfo = unsafe { mem::zeroed() };
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size_of::<libc::signalfd_siginfo>(),
            )
        };
        n > 0
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits up to `timeout_ms` for input on `fd` (`poll`); a signal counts as a timeout.
pub(crate) fn poll_in(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINTR) {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0)
}

/// Waits up to `timeout_ms` until `fd` is writable.
pub(crate) fn poll_out(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINTR) {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0)
}

/// Milliseconds (rounded up, capped) until the monotonic instant `deadline_ns`, for
/// `poll`-style timeouts.
pub(crate) fn ms_until(deadline_ns: u64) -> i32 {
    let left = deadline_ns.saturating_sub(mono_ns());
    i32::try_from(left.div_ceil(1_000_000)).unwrap_or(i32::MAX)
}

/// Process-wide stop flag set by SIGINT/SIGTERM for the helper tools that use blocking
/// calls (the traffic tool).
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM handlers (without `SA_RESTART`, so blocking calls return
/// `EINTR`) that set the flag read by [`stop_requested`].
pub(crate) fn install_stop_flag() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = mem::zeroed();
        sa.sa_sigaction = on_stop_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Whether SIGINT/SIGTERM arrived since [`install_stop_flag`].
pub(crate) fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::SeqCst)
}

/// An `ifreq` naming interface `name`.
pub(crate) fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is POD.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} too long"),
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

/// The index of interface `name` (`SIOCGIFINDEX` on any socket `fd`).
pub(crate) fn ifindex_of(fd: RawFd, name: &str) -> io::Result<i32> {
    let mut req = ifreq_for(name)?;
    // SAFETY: SIOCGIFINDEX reads the name and fills the index.
    cvt(unsafe { libc::ioctl(fd, libc::SIOCGIFINDEX, &mut req) })
        .map_err(|e| io::Error::new(e.kind(), format!("interface {name}: {e}")))?;
    // SAFETY: filled by the kernel.
    Ok(unsafe { req.ifr_ifru.ifru_ifindex })
}

/// `ETH_P_ALL`: every protocol.
pub(crate) const ETH_P_ALL: u16 = 0x0003;

/// A non-blocking `AF_PACKET` socket bound to interface `ifname`, with kernel receive
/// timestamps (`SO_TIMESTAMPNS`), frames this host sends on the interface left out, and a
/// receive buffer of `rcvbuf` bytes (forced past the sysctl limit when allowed). Returns
/// it with the interface's index.
pub(crate) fn packet_socket(ifname: &str, rcvbuf: i32) -> io::Result<(OwnedFd, i32)> {
    // Protocol 0: receive nothing until bound to the interface.
    let fd = socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, 0)?;
    let raw = fd.as_raw_fd();
    let ifindex = ifindex_of(raw, ifname)?;
    setsockopt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32)?;
    setsockopt(raw, libc::SOL_SOCKET, SO_TIMESTAMPNS, &1i32)?;
    if setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf).is_err() {
        setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf)?;
    }
    // SAFETY: sockaddr_ll is POD.
    let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: a valid sockaddr_ll of the given size.
    cvt(unsafe {
        libc::bind(
            raw,
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    })?;
    Ok((fd, ifindex))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_advances_and_sleep_reaches_deadline() {
        let a = mono_ns();
        let deadline = a + 2_000_000;
        sleep_until(deadline, 200_000);
        let b = mono_ns();
        assert!(b >= deadline, "woke at {b}, deadline {deadline}");
        assert!(b - a < 500_000_000);
    }

    #[test]
    fn pid_alive_counts_zombies_as_gone() {
        assert!(pid_alive(std::process::id() as i32));
        assert!(!pid_alive(0));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Not reaped yet: a zombie once it has exited.
        let deadline = mono_ns() + 2_000_000_000;
        while pid_alive(pid) && mono_ns() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(!pid_alive(pid), "exited child still counted alive");
        child.wait().unwrap();
    }

    #[test]
    fn realtime_offset_is_stable() {
        let a = realtime_offset_ns();
        let b = realtime_offset_ns();
        assert!((a - b).abs() < 1_000_000, "{a} vs {b}");
    }
}
