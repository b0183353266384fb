//! The Prometheus endpoint over real TCP: idle connections do not hold scrapes up, a request
//! split across segments is read whole, and other paths, methods and oversized requests get the
//! HTTP answers a scraper or an operator expects.

use motet_runtime::{metrics, Runtime, RuntimeConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `parts` (pausing between them) and reads the whole answer; fails if it takes longer
/// than one second, well under the server's 2 s wait for an idle client.
fn ask(address: SocketAddr, parts: &[&[u8]]) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        stream.write_all(part).unwrap();
    }
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer within a second");
    String::from_utf8(answer).unwrap()
}

/// A connection to `address` from the loop-back address `127.0.0.{host}`.
fn connect_from(host: u8, address: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from(([127, 0, 0, host], 0)).into()).unwrap();
    socket.connect(&address.into()).unwrap();
    socket.into()
}

#[test]
fn scrapes_are_answered_beside_idle_connections_and_bad_requests_get_http_errors() {
    let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
    let address = metrics::serve("127.0.0.1:0".parse().unwrap(), runtime.stats_handle()).unwrap();
    // Idle clients that connect and never send: one connection at a time, these held every scrape
    // behind them for 2 s each. As many as it serves at once, from one address: that client
    // gets `PER_CLIENT_MAX` of the slots, the others stay free (before, it took them all).
    let idle: Vec<TcpStream> = (0..metrics::CONNECTIONS_MAX).map(|_| connect_from(2, address)).collect();
    std::thread::sleep(Duration::from_millis(100));
    // A scrape whose request arrives in two segments.
    let answer = ask(address, &[b"GET /metrics HTTP/1.1\r\nHost: x\r\n", b"Accept: text/plain\r\n\r\n"]);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("Content-Type: text/plain; version=0.0.4\r\n"), "{answer}");
    assert!(answer.contains("\nmotet_datagrams_received_total "), "{answer}");
    // A request line with no version and bare LFs, as typed into `nc` (it got 404: the path was
    // read up to the first CR, which never came).
    for bare in [&b"GET /metrics\n\n"[..], b"GET /metrics\r\n\r\n", b"GET /metrics HTTP/1.0\nHost: x\n\n"] {
        let answer = ask(address, &[bare]);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{:?}: {answer}", String::from_utf8_lossy(bare));
    }
    let query = ask(address, &[b"GET /metrics?x=1 HTTP/1.1\r\n\r\n"]);
    assert!(query.starts_with("HTTP/1.1 200 OK\r\n"), "{query}");
    // HEAD: the headers alone.
    let head = ask(address, &[b"HEAD /metrics HTTP/1.1\r\n\r\n"]);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
    assert!(!head.contains("motet_"), "{head}");
    // Another path, another method, headers past the limit.
    assert!(ask(address, &[b"GET / HTTP/1.1\r\n\r\n"]).starts_with("HTTP/1.1 404 "));
    let post = ask(address, &[b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"]);
    assert!(post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"), "{post}");
    let big = format!("GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(metrics::REQUEST_MAX));
    assert!(ask(address, &[big.as_bytes()]).starts_with("HTTP/1.1 431 "));
    // The first idle clients have been closed by now (2 s each, side by side).
    std::thread::sleep(metrics::IO_TIMEOUT);
    // As many idle clients as it serves at once, from four addresses, take every slot: a scrape
    // from another address is still answered at once, the oldest idle connection closed to make
    // room (before, it was closed unanswered until the idle ones timed out: a review's finding).
    let per = metrics::PER_CLIENT_MAX;
    let more: Vec<TcpStream> =
        (0..metrics::CONNECTIONS_MAX).map(|i| connect_from(3 + (i / per) as u8, address)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let past = ask(address, &[b"GET /metrics HTTP/1.0\r\n\r\n"]);
    assert!(past.starts_with("HTTP/1.1 200 OK\r\n"), "past the idle ones: {past}");
    // The oldest idle connection was closed: it reads the end (or a reset), at once.
    let mut oldest = more[0].try_clone().unwrap();
    oldest.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut rest = Vec::new();
    match oldest.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty()),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "the oldest idle one: {e}"),
    }
    drop((idle, more));
}

/// Once its runtime stops, the endpoint closes its port (an embedder that starts a runtime again
/// on the same address binds it), with no scrape needed to notice; and a client that sends a
/// byte just before its 2 s are up is cut off at 2 s, not after one more 2 s read.
#[test]
#[allow(clippy::disallowed_types)] // wall-clock waits on real sockets
fn the_endpoint_closes_with_its_runtime_and_a_late_byte_buys_no_time() {
    let runtime = Runtime::start(RuntimeConfig::default()).unwrap();
    let address = metrics::serve("127.0.0.1:0".parse().unwrap(), runtime.stats_handle()).unwrap();
    let mut late = TcpStream::connect(address).unwrap();
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1_800));
    late.write_all(b"G").unwrap();
    late.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let _ = late.read_to_end(&mut rest); // the end, or a reset
    let held = started.elapsed();
    assert!(rest.is_empty() && held < Duration::from_millis(2_800), "held {held:?}, answered {rest:?}");
    drop(runtime);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        match std::net::TcpListener::bind(address) {
            Ok(_) => break,
            Err(e) => assert!(std::time::Instant::now() < deadline, "the port is still bound: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
