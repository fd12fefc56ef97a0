//! `quic-bulk`: a real QUIC connection (quinn 0.11 over rustls with ring), carrying
//! `tcp-bulk`'s records (1400 bytes, the first 8 the `CLOCK_MONOTONIC` time at which
//! the record was handed to the stack) on one unidirectional stream, as fast as its
//! congestion control allows (Cubic; `--cc newreno` or `bbr` picks quinn's others).
//!
//! The end on the server's side is the QUIC server, on UDP port 443 (the runner binds
//! it there): the tunnel takes a UDP flow to or from port 443 whose first packet has
//! QUIC's fixed bit, or is a long header naming QUIC version 1 or 2, for QUIC
//! (`docs/protocol.md` 4.2; quinn greases the fixed bit, RFC 9287). In an upload the receiver listens and
//! the sender connects; in a download the sender listens (`--listen`) and the receiver
//! connects (`--connect`). The server's certificate is made up at each run
//! (`rcgen`), and the client takes any certificate (its handshake signature is still
//! checked): the lab's traffic is test data between its own namespaces.
//!
//! A record's latency is from its hand-over to quinn to its read: unlike `tcp-bulk`,
//! whose sender keeps little unsent data in the kernel (`TCP_NOTSENT_LOWAT`), it
//! includes the wait in quinn's send buffer. Counters of the sending end (`SendSummary::
//! tcp`, as for TCP): packets sent, packets and bytes lost, the smoothed RTT.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use quinn::crypto::rustls::QuicClientConfig;
use quinn::{ClientConfig, Connection, Endpoint, ServerConfig, TransportConfig};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::{
    RECORD_BYTES, RecvArgs, RecvSummary, SendArgs, SendSummary, StreamSink, TcpSendInfo, Times,
};
use crate::sys;

/// The name the client asks for and the certificate carries.
const SERVER_NAME: &str = "latebind-lab";
/// IPv4 and UDP headers: `--packet-bytes` less these is the QUIC packet.
const UDP_OVERHEAD: usize = 28;
/// The smallest QUIC packet a path must carry (RFC 9000 14).
const MIN_QUIC_PACKET: usize = 1200;

/// The runtime both ends run their connection on: one thread, as the TCP ends have.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")
}

/// How long from now until `t` (ns of `CLOCK_MONOTONIC`), as a tokio deadline.
fn deadline(t: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_nanos(t.saturating_sub(sys::mono_ns()))
}

/// The connection's transport: the congestion control of `cc`, and with `packet_bytes`
/// (the IP packet size) packets of that size from the start, without a search above it.
fn transport(cc: Option<&str>, packet_bytes: Option<usize>) -> Result<Arc<TransportConfig>> {
    use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
    let mut t = TransportConfig::default();
    match cc.unwrap_or("cubic") {
        "cubic" => t.congestion_controller_factory(Arc::new(CubicConfig::default())),
        "newreno" | "reno" => t.congestion_controller_factory(Arc::new(NewRenoConfig::default())),
        "bbr" => t.congestion_controller_factory(Arc::new(BbrConfig::default())),
        other => bail!("--cc {other}: quic-bulk's congestion control is cubic, newreno or bbr"),
    };
    if let Some(p) = packet_bytes {
        let quic = p.saturating_sub(UDP_OVERHEAD);
        let Some(mtu) = u16::try_from(quic)
            .ok()
            .filter(|&m| usize::from(m) >= MIN_QUIC_PACKET)
        else {
            bail!(
                "--packet-bytes {p}: quic-bulk needs {} to 65535",
                MIN_QUIC_PACKET + UDP_OVERHEAD
            );
        };
        t.initial_mtu(mtu);
        t.mtu_discovery_config(None);
    }
    Ok(Arc::new(t))
}

/// A server configuration with a certificate made up for this run.
fn server_config(transport: Arc<TransportConfig>) -> Result<ServerConfig> {
    let made = rcgen::generate_simple_self_signed(vec![SERVER_NAME.into()])
        .context("a certificate for the QUIC server")?;
    let key = PrivatePkcs8KeyDer::from(made.key_pair.serialize_der());
    let mut c = ServerConfig::with_single_cert(vec![made.cert.der().clone()], key.into())
        .context("the QUIC server's TLS configuration")?;
    c.transport_config(transport);
    Ok(c)
}

/// Takes the server's certificate whatever it is, and checks its handshake signature.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config(transport: Arc<TransportConfig>) -> Result<ClientConfig> {
    // ring, as quinn's `rustls-ring` uses for the server: rustls deprecates it for lacking
    // post-quantum key exchange, which test traffic between the lab's namespaces does
    // not need; aws-lc-rs would add a C build (cmake) to every build of the project.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let crypto = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let quic = QuicClientConfig::try_from(crypto).context("the QUIC client's TLS configuration")?;
    let mut c = ClientConfig::new(Arc::new(quic));
    c.transport_config(transport);
    Ok(c)
}

/// The flow's connection: as the QUIC server (`listen`: the first connection to `bind`
/// before `until`), or as its client (from `bind` to `to`, at once). `None`: no
/// connection came.
async fn connection(
    listen: bool,
    bind: SocketAddrV4,
    to: Option<SocketAddrV4>,
    transport: Arc<TransportConfig>,
    until: u64,
) -> Result<Option<(Endpoint, Connection)>> {
    if listen {
        let ep = Endpoint::server(server_config(transport)?, SocketAddr::V4(bind))
            .with_context(|| format!("QUIC server on {bind}"))?;
        let Ok(Some(incoming)) = tokio::time::timeout_at(deadline(until), ep.accept()).await else {
            return Ok(None);
        };
        let conn = incoming.await.context("QUIC handshake (server)")?;
        return Ok(Some((ep, conn)));
    }
    let to = to.context("a QUIC client needs the server's address")?;
    let mut ep =
        Endpoint::client(SocketAddr::V4(bind)).with_context(|| format!("QUIC client on {bind}"))?;
    ep.set_default_client_config(client_config(transport)?);
    let connecting = ep
        .connect(SocketAddr::V4(to), SERVER_NAME)
        .with_context(|| format!("QUIC connection to {to}"))?;
    match tokio::time::timeout_at(deadline(until), connecting).await {
        Ok(conn) => Ok(Some((
            ep,
            conn.with_context(|| format!("QUIC handshake with {to}"))?,
        ))),
        Err(_) => Ok(None),
    }
}

/// Closes the connection and waits (at most a second) for the peer to hear it.
async fn close(ep: Endpoint, conn: Connection) {
    conn.close(0u32.into(), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
}

/// `traffic send --kind quic-bulk`.
pub(super) fn send(a: &SendArgs, times: Times, s: &mut SendSummary) -> Result<()> {
    let cc = a.cc.clone().unwrap_or_else(|| "cubic".into());
    let transport = transport(Some(&cc), a.packet_bytes)?;
    let bind = a.bind.context("quic-bulk senders need --bind")?;
    let interval_ns = super::record_interval_ns(a.rate_mbps)?;
    if !a.listen {
        sys::sleep_until(times.start, 0);
    }
    runtime()?.block_on(async {
        let Some((ep, conn)) = connection(a.listen, bind, a.to, transport, times.until).await?
        else {
            match a.to {
                Some(to) if !a.listen => bail!("no QUIC handshake with {to} before the flow's end"),
                _ => bail!("listening on {bind}: no QUIC connection before the flow's end"),
            }
        };
        tokio::time::sleep_until(deadline(times.start)).await;
        let mut stream = conn.open_uni().await.context("opening the stream")?;
        let offered_at =
            |k: u64| interval_ns.map(|iv| times.start + (k as f64 * iv).round() as u64);
        let end = times.stop.min(times.until);
        let mut rec = [0u8; RECORD_BYTES];
        while !sys::stop_requested() {
            let now = sys::mono_ns();
            if now >= end {
                break;
            }
            if let Some(t) = offered_at(s.sent).filter(|&t| t > now) {
                tokio::time::sleep_until(deadline(t.min(end))).await;
                continue;
            }
            rec[..8].copy_from_slice(&now.to_be_bytes());
            if s.sent == 0 {
                s.first_send_ns = now;
            }
            s.last_send_ns = now;
            match tokio::time::timeout_at(deadline(end), stream.write_all(&rec)).await {
                Ok(Ok(())) => {
                    s.sent += 1;
                    s.bytes += RECORD_BYTES as u64;
                }
                Ok(Err(e)) => {
                    *s.errors.entry(format!("write: {e}")).or_default() += 1;
                    break;
                }
                Err(_) => break,
            }
        }
        // No more data; wait (until the flow's end) for what was written to be
        // acknowledged, then read the counters.
        let _ = stream.finish();
        let _ = tokio::time::timeout_at(deadline(times.until), stream.stopped()).await;
        let path = conn.stats().path;
        s.tcp = Some(TcpSendInfo {
            cc,
            data_segs_out: path.sent_packets,
            total_retrans: path.lost_packets,
            bytes_retrans: path.lost_bytes,
            dsack_dups: 0,
            bytes_acked: 0,
            srtt_ms: path.rtt.as_secs_f64() * 1e3,
            subflows: 0,
        });
        close(ep, conn).await;
        Ok(())
    })
}

/// `traffic recv --kind quic-bulk`.
pub(super) fn recv(a: &RecvArgs, times: Times) -> Result<RecvSummary> {
    let (mut summary, cuts) = super::stream_summary(a, times);
    let transport = transport(None, a.packet_bytes)?;
    if a.connect.is_some() {
        sys::sleep_until(times.start, 0);
    }
    runtime()?.block_on(async {
        let listen = a.connect.is_none();
        let Some((ep, conn)) =
            connection(listen, a.bind, a.connect, transport, times.until).await?
        else {
            return Ok(summary);
        };
        let mut sink = StreamSink::new(times, cuts);
        if let Ok(Ok(mut stream)) =
            tokio::time::timeout_at(deadline(times.until), conn.accept_uni()).await
        {
            while !sys::stop_requested() {
                // Whatever ends the read (the stream's end, the connection's, the tool's
                // end) ends the flow; what came before it counts.
                let read = tokio::time::timeout_at(
                    deadline(times.until),
                    stream.read_chunk(usize::MAX, true),
                );
                match read.await {
                    Ok(Ok(Some(chunk))) => sink.on_read(&chunk.bytes),
                    _ => break,
                }
            }
        }
        let rx = conn.stats().udp_rx.datagrams;
        summary.sent = rx;
        summary.delivered = rx;
        sink.finish(&mut summary);
        close(ep, conn).await;
        Ok(summary)
    })
}
