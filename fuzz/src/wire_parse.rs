//! The `wire_parse` target: any bytes through the wire-format parser, then the frames
//! that parsed emitted again and parsed back.
//!
//! Checked, besides "never panics" (which `wire.rs` promises for every function):
//! - the frame iterator is fused and stops after the first error; PADDING is last;
//!   `Frames::is_ack_eliciting` agrees with the iteration (its error is the iteration's);
//! - ACK ranges are descending, disjoint and non-adjacent, start at `largest`, their
//!   count is the iterator's exact size; LOSS_REPORT entries number `len()`;
//! - DATA_TEMPLATE's slot and hlen, DATA_COMPACT's slot and generation are in range;
//! - the encoding is canonical: emitting each parsed frame reproduces its bytes exactly
//!   (PADDING as one byte; an empty LOSS_REPORT, which `emit_loss_report` does not write,
//!   as nothing), and the `*_len` helpers give the emitted lengths;
//! - the re-emitted datagram parses to the same header and equal frames.

use latebind_proto::wire::{self, DecodeError, Frame};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let _ = wire::Header::parse(data);
    // The bytes as a frame list without a header.
    check_list(wire::frames(data));

    let Ok((header, frames)) = wire::parse(data) else {
        return;
    };
    // Packet-number expansion against an expected value from the input.
    if let Some(tail) = data.last_chunk::<8>() {
        let expected = u64::from_be_bytes(*tail);
        assert_eq!(wire::expand(header.pn, expected) as u32, header.pn);
    }
    let body = &data[wire::HEADER_LEN..];
    let items = check_list(frames.clone());
    match (frames.is_ack_eliciting(), items.last()) {
        (Err(e), Some(Err(last))) => assert_eq!(e, *last),
        (Ok(eliciting), _) => {
            assert!(items.iter().all(Result::is_ok));
            assert_eq!(
                eliciting,
                items.iter().flatten().any(Frame::is_ack_eliciting)
            );
        }
        (res, last) => panic!("is_ack_eliciting() = {res:?} but the last item is {last:?}"),
    }
    let parsed: Vec<Frame<'_>> = items.iter().flatten().copied().collect();
    for frame in &parsed {
        inspect(frame);
    }

    // Emit again and compare byte for byte.
    let mut out = Vec::new();
    header.emit(&mut out);
    assert_eq!(out.len(), wire::HEADER_LEN);
    assert_eq!(out[0], data[0]);
    assert_eq!(
        out[2..],
        data[2..wire::HEADER_LEN],
        "header fields re-emitted differ"
    );
    let mut at = 0;
    for frame in &parsed {
        let start = out.len();
        emit(&mut out, frame);
        let enc = &out[start..];
        match frame {
            Frame::Padding => {
                assert_eq!(enc, [0]);
                assert_eq!(body[at], 0);
                at = body.len();
            }
            Frame::LossReport(report) if report.is_empty() => {
                assert!(enc.is_empty(), "emit_loss_report wrote an empty report");
                assert_eq!(body[at..at + 2], [0x03, 0]);
                at += 2;
            }
            _ => {
                assert_eq!(
                    enc,
                    &body[at..at + enc.len()],
                    "re-emitted {frame:?} differs from the bytes it was parsed from"
                );
                at += enc.len();
            }
        }
    }
    if items.iter().all(Result::is_ok) {
        assert_eq!(
            at,
            body.len(),
            "frames did not account for the whole datagram"
        );
    }

    // Parse the re-emitted datagram back.
    let expected: Vec<&Frame<'_>> = parsed
        .iter()
        .filter(|f| !matches!(f, Frame::LossReport(r) if r.is_empty()))
        .collect();
    if expected.is_empty() {
        assert_eq!(wire::parse(&out).err(), Some(DecodeError::Truncated));
        return;
    }
    let (again_header, again) = wire::parse(&out).expect("re-emitted datagram parses");
    assert_eq!(again_header, header);
    let again: Vec<Frame<'_>> = again
        .collect::<Result<_, _>>()
        .expect("re-emitted frames decode");
    assert_eq!(again.len(), expected.len());
    for (a, b) in again.iter().zip(expected) {
        assert_eq!(a, b, "frame changed in the round trip");
    }
}

/// Collects a frame list, checking it is fused and ends at an error or after PADDING.
fn check_list(frames: wire::Frames<'_>) -> Vec<Result<Frame<'_>, DecodeError>> {
    let mut it = frames;
    let items: Vec<_> = it.by_ref().collect();
    assert!(it.next().is_none(), "frame iterator not fused");
    for (i, item) in items.iter().enumerate() {
        let last = i + 1 == items.len();
        match item {
            Err(_) => assert!(last, "frames after an error"),
            Ok(Frame::Padding) => assert!(last, "frames after PADDING"),
            Ok(_) => {}
        }
    }
    items
}

/// Walks a frame's contents and checks what a decoded frame guarantees.
fn inspect(frame: &Frame<'_>) {
    match frame {
        Frame::Ack(ack) => {
            let ranges: Vec<_> = ack.ranges().collect();
            assert_eq!(
                ranges.len(),
                ack.ranges().len(),
                "ExactSizeIterator is wrong"
            );
            assert!(!ranges.is_empty() && ranges.len() <= wire::MAX_ACK_RANGES);
            assert_eq!(*ranges[0].end(), ack.largest);
            assert_eq!(
                ranges[0].end() - ranges[0].start(),
                u64::from(ack.first_range)
            );
            for r in &ranges {
                assert!(r.start() <= r.end());
            }
            for w in ranges.windows(2) {
                assert!(w[1].end() < w[0].start(), "ranges not descending: {w:?}");
                assert!(w[0].start() - w[1].end() >= 2, "ranges adjacent: {w:?}");
            }
            let mut it = ack.ranges();
            for _ in it.by_ref() {}
            assert!(it.next().is_none(), "ack ranges not fused");
            let _ = format!("{ack:?}");
        }
        Frame::LossReport(report) => {
            let entries: Vec<_> = report.entries().collect();
            assert_eq!(entries.len(), report.len());
            assert_eq!(entries.len(), report.entries().len());
            assert_eq!(report.is_empty(), entries.is_empty());
            assert!(entries.len() <= wire::MAX_LOSS_ENTRIES);
            let _ = format!("{report:?}");
        }
        Frame::Data(data) => match data.form {
            wire::DataForm::Full => assert!(data.payload.len() <= wire::MAX_DATA_PAYLOAD),
            wire::DataForm::Template { slot, hlen, .. } => {
                assert!(usize::from(slot) < wire::MAX_TEMPLATE_SLOTS);
                assert!(hlen > 0 && usize::from(hlen) <= wire::MAX_TEMPLATE_LEN);
                assert!(usize::from(hlen) <= data.payload.len());
            }
            wire::DataForm::Compact { slot, generation } => {
                assert!(usize::from(slot) < wire::MAX_TEMPLATE_SLOTS);
                assert!(u32::from(generation) < 1 << wire::COMPACT_GENERATION_BITS);
            }
        },
        Frame::Padding
        | Frame::Ping
        | Frame::Probe { .. }
        | Frame::LinkStatus { .. }
        | Frame::RxTime { .. }
        | Frame::LinkMtu { .. } => {}
    }
}

/// Emits `frame` with the wire module's emitters, checking the `*_len` helpers.
fn emit(out: &mut Vec<u8>, frame: &Frame<'_>) {
    let start = out.len();
    let expected_len = match frame {
        Frame::Padding => {
            wire::emit_padding(out, 1);
            1
        }
        Frame::Ping => {
            wire::emit_ping(out);
            wire::PING_FRAME_LEN
        }
        Frame::Probe { unacked, due_us } => {
            wire::emit_probe(out, *unacked, *due_us);
            wire::PROBE_FRAME_LEN
        }
        Frame::Ack(ack) => {
            let ranges: Vec<_> = ack.ranges().collect();
            let n = wire::emit_ack(out, ack.link, ack.ack_delay_us, &ranges);
            assert_eq!(n, ranges.len(), "emit_ack dropped ranges of a parsed frame");
            wire::ack_frame_len(n)
        }
        Frame::LossReport(report) => {
            let entries: Vec<_> = report.entries().collect();
            assert_eq!(wire::emit_loss_report(out, &entries), entries.len());
            wire::loss_report_len(entries.len())
        }
        Frame::Data(data) => {
            let n = wire::DataNumbers {
                global_seq: data.global_seq,
                flow_id: data.flow_id,
                flow_seq: data.flow_seq,
                recovered: data.recovered,
            };
            match data.form {
                wire::DataForm::Full => {
                    wire::emit_data(
                        out,
                        data.global_seq,
                        data.flow_id,
                        data.flow_seq,
                        data.payload,
                        data.recovered,
                    )
                    .expect("a parsed payload fits a DATA frame");
                    wire::data_frame_len(data.payload.len())
                }
                wire::DataForm::Template {
                    slot,
                    generation,
                    hlen,
                    ipv4_checksum,
                } => {
                    wire::emit_data_template(
                        out,
                        n,
                        slot,
                        generation,
                        hlen,
                        ipv4_checksum,
                        data.payload,
                    )
                    .expect("a parsed template is in range");
                    wire::DATA_TEMPLATE_HEADER_LEN + data.payload.len()
                }
                wire::DataForm::Compact { slot, generation } => {
                    // It ends the list: nothing parsed follows it.
                    assert_eq!(data.flow_id, 0);
                    wire::emit_data_compact(out, n, slot, generation, |o| {
                        o.extend_from_slice(data.payload)
                    })
                    .expect("a parsed slot is in range");
                    wire::DATA_COMPACT_HEADER_LEN + data.payload.len()
                }
            }
        }
        Frame::LinkStatus { link, state } => {
            wire::emit_link_status(out, *link, *state);
            wire::LINK_STATUS_FRAME_LEN
        }
        Frame::RxTime {
            link,
            pn,
            received_us,
        } => {
            wire::emit_rx_time(out, *link, *pn, *received_us);
            wire::RX_TIME_FRAME_LEN
        }
        Frame::LinkMtu { link, max_datagram } => {
            wire::emit_link_mtu(out, *link, *max_datagram);
            wire::LINK_MTU_FRAME_LEN
        }
    };
    assert_eq!(out.len() - start, expected_len, "*_len disagrees with emit");
}
