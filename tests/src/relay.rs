//! A TCP relay that delays every byte by a fixed time each way: the link
//! latency of the delay-and-loss test. (This machine's kernel has no
//! `netem` queueing discipline, so the delay is added here, in order,
//! chunk by chunk as the bytes arrive; packet loss is the link's, made
//! with nft in the database's namespace.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// Relays connections made to [`Relay::addr`] to another address.
pub struct Relay {
    /// Where it listens (on 127.0.0.1).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

/// How often the accept loop looks whether it should stop.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

impl Relay {
    /// Relays every connection to `to`, each byte `delay` later than it
    /// came, both ways.
    pub fn start(to: SocketAddr, delay: Duration) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        relay(client, to, delay);
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(ACCEPT_POLL);
                    }
                    Err(error) => panic!("the relay's accept: {error}"),
                }
            }
        });
        Relay { addr, stop }
    }
}

impl Drop for Relay {
    /// Stops taking connections; those open end with their ends.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Relays `client` to a new connection to `to`, both ways.
fn relay(client: TcpStream, to: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(to) else {
        return;
    };
    for stream in [&client, &server] {
        stream.set_nodelay(true).unwrap();
    }
    let (client_in, server_in) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    pump(client_in, server, delay);
    pump(server_in, client, delay);
}

/// Copies `from` to `to`, each chunk `delay` after it was read, in order;
/// once `from` ends, ends `to`'s writing side.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (send, receive) = channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buffer = vec![0; 64 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    if send
                        .send((Instant::now() + delay, buffer[..read].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, bytes) in receive {
            // The link's latency: this chunk leaves at its time.
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
