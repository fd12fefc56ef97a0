//! Seal and open allocate nothing once the caller's buffers have their capacity: a
//! counting global allocator watches one thread doing many of each.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use latebind_crypto::{HEADER_LEN, Initiator, KeyRing, Responder, StaticSecret, TAG_LEN};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn seal_and_open_do_not_allocate_in_steady_state() {
    let client = StaticSecret::from_random_bytes([1; 32]);
    let mut responder = Responder::new(
        StaticSecret::from_random_bytes([2; 32]),
        vec![client.public_key()],
    );
    let (mut initiator, initiation) = Initiator::new(
        &client,
        &responder.public_key(),
        9,
        0,
        0,
        Duration::from_secs(1_700_000_000),
        [3; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [4; 32])
        .expect("accepted");
    let mut up = KeyRing::new();
    up.install(
        initiator
            .handle_response(&accepted.response)
            .expect("response"),
    )
    .expect("install");
    let mut down = KeyRing::new();
    down.install(accepted.transport).expect("install");

    let mut buf = Vec::with_capacity(1500 + TAG_LEN);
    let mut out = Vec::with_capacity(1500 + TAG_LEN);
    let before = ALLOCATIONS.with(Cell::get);
    for pn in 0..1000u32 {
        buf.clear();
        buf.extend_from_slice(&[1, 0, 0, 0, 0, 9, 0, 0]);
        buf.extend_from_slice(&pn.to_be_bytes());
        buf.resize(HEADER_LEN + 1388, 0x5a);
        up.seal(&mut buf).expect("seal");
        down.open(&buf, &mut out).expect("open");
        assert_eq!(out.len(), HEADER_LEN + 1388);
    }
    assert_eq!(ALLOCATIONS.with(Cell::get) - before, 0, "allocations");
}
