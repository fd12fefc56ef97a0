//! When a datagram really leaves the host.
//!
//! The kernel accepts a datagram into the socket and then keeps it in the interface's
//! qdisc and driver until the interface transmits it. Until then it is as committed to its
//! link as a packet in the late-binding paper's driver queue: it is lost if the link goes
//! down and everything bound to the link after it waits behind it. So the daemon reports a
//! departure to the engine (`handle_tx_done`) when the datagram has left the kernel, not
//! when `sendto` returns; the engine's budget below the binding point then counts the
//! kernel's queue, as the simulator's does.
//!
//! The kernel tells how many bytes of a socket's datagrams it still holds (`SIOCOUTQ`:
//! the sum of their buffers' true sizes, released when the interface takes them, in
//! order). [`Departures`] keeps, per link, the true size of each datagram it sent and not
//! yet seen leave, and turns a reading of that count into a number of departures.

use std::collections::VecDeque;

/// Datagrams of one link handed to the kernel and not yet seen leaving it.
#[derive(Debug, Default)]
pub struct Departures {
    /// True size of each datagram still in the kernel, oldest first.
    pending: VecDeque<usize>,
    /// Their sum.
    total: usize,
}

/// An estimate of the kernel's buffer size for a datagram of `len` bytes, for when the
/// reading around a send does not give it (something left in between): the data rounded
/// up to the allocator's power of two plus the buffer head, as Linux accounts it.
fn estimate(len: usize) -> usize {
    (len + 384).next_power_of_two() + 256
}

impl Departures {
    /// Whether every datagram handed over has left.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Datagrams still in the kernel.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// A datagram of `len` bytes was handed over; the kernel held `before` bytes just
    /// before and `after` just after. Returns how many datagrams have left (the new one
    /// included when the interface took it at once).
    pub fn on_sent(&mut self, len: usize, before: usize, after: usize) -> usize {
        let grew = after.saturating_sub(before);
        // The growth is this datagram's true size unless something left in between (then
        // it is smaller); sizes outside what one datagram can take fall back to the
        // estimate.
        let size = if after > 0 && grew > len && grew <= 4 * estimate(len) {
            grew
        } else {
            estimate(len)
        };
        self.pending.push_back(size);
        self.total += size;
        self.on_queued(after)
    }

    /// The kernel holds `queued` bytes of this socket's datagrams. Returns how many of
    /// the oldest pending datagrams have left since the last reading.
    pub fn on_queued(&mut self, queued: usize) -> usize {
        let mut left = 0;
        // Datagrams leave oldest first: drop the oldest while what remains still explains
        // the reading better than keeping it would (half-size rounding absorbs estimates).
        while let Some(&front) = self.pending.front() {
            if queued + front / 2 <= self.total {
                self.pending.pop_front();
                self.total -= front;
                left += 1;
            } else {
                break;
            }
        }
        left
    }

    /// The interface went down: what it held is gone. Returns how many were pending.
    pub fn clear(&mut self) -> usize {
        let n = self.pending.len();
        self.pending.clear();
        self.total = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_the_interface_takes_at_once_leaves_at_once() {
        let mut d = Departures::default();
        assert_eq!(d.on_sent(1442, 0, 0), 1);
        assert!(d.is_empty());
    }

    #[test]
    fn readings_count_departures_in_order() {
        // Sizes as Linux 6.18 accounts them: 2304 for 1442 bytes, 832 for 100.
        let mut d = Departures::default();
        assert_eq!(d.on_sent(1442, 0, 2304), 0);
        assert_eq!(d.on_sent(1442, 2304, 4608), 0);
        assert_eq!(d.on_sent(100, 4608, 5440), 0);
        assert_eq!(d.len(), 3);
        // Nothing left yet.
        assert_eq!(d.on_queued(5440), 0);
        // The first left.
        assert_eq!(d.on_queued(3136), 1);
        // The second left, then the small one.
        assert_eq!(d.on_queued(832), 1);
        assert_eq!(d.on_queued(0), 1);
        assert!(d.is_empty());
    }

    #[test]
    fn a_departure_between_the_readings_around_a_send_uses_the_estimate() {
        let mut d = Departures::default();
        d.on_sent(1442, 0, 2304);
        // The first left while the second went in: the growth (0) says nothing.
        assert_eq!(d.on_sent(1442, 2304, 2304), 1);
        assert_eq!(d.len(), 1);
        assert_eq!(d.on_queued(0), 1);
    }

    #[test]
    fn estimates_round_to_the_nearest_count() {
        // Only estimates (growth never seen): readings close to a count still map to it.
        let mut d = Departures::default();
        for _ in 0..3 {
            d.on_sent(1442, 0, 0);
        }
        assert!(d.is_empty());
        d.pending.extend([estimate(1442); 3]);
        d.total = 3 * estimate(1442);
        // Two real datagrams of 2304 remain: one left.
        assert_eq!(d.on_queued(4608), 1);
        assert_eq!(d.on_queued(2304), 1);
        assert_eq!(d.on_queued(0), 1);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut d = Departures::default();
        d.on_sent(1442, 0, 2304);
        assert_eq!(d.clear(), 1);
        assert_eq!(d.on_queued(0), 0);
    }
}
