//! loom model checks of the protocol: open / send / recv / close with two
//! clients, two ports and one server, and fire-and-forget calls. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p rpc-runtime --test loom --release`.
//!
//! Packet words are relaxed atomics in the model, so a missing acquire or
//! release on the mailbox handoff shows up as a stale value read by the
//! other side (and a failed assertion), not only as a hang.
#![cfg(loom)]

use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use rpc_runtime::protocol::{
    client_local_words, Client, Layout, Parts, Server, ServerLocks, SharedBuffer, SharedHeader,
};

struct Mem {
    client_out: Vec<AtomicU32>,
    server_out: Vec<AtomicU32>,
    headers: Vec<SharedHeader>,
    packets: Vec<SharedBuffer>,
    client_locks: Vec<AtomicU32>,
    server_locks: ServerLocks,
    layout: Layout,
}

impl Mem {
    fn new(ports: u32) -> Arc<Mem> {
        let n = ports as usize;
        Arc::new(Mem {
            client_out: (0..n).map(|_| AtomicU32::new(0)).collect(),
            server_out: (0..n).map(|_| AtomicU32::new(0)).collect(),
            headers: (0..n).map(|_| SharedHeader::new()).collect(),
            packets: (0..n).map(|_| SharedBuffer::new()).collect(),
            client_locks: (0..client_local_words(ports)).map(|_| AtomicU32::new(0)).collect(),
            server_locks: ServerLocks::new(ports),
            layout: Layout::new(ports, 1).unwrap(),
        })
    }

    fn parts(&self) -> Parts {
        Parts {
            client_outbox: self.client_out.as_ptr(),
            server_outbox: self.server_out.as_ptr(),
            headers: self.headers.as_ptr(),
            packets: self.packets.as_ptr(),
        }
    }

    fn client(&self) -> Client<'_> {
        // SAFETY: the arrays match the layout and outlive the client.
        unsafe { Client::from_parts(self.layout, self.parts(), self.client_locks.as_ptr()) }
    }

    fn server(&self) -> Server<'_> {
        // SAFETY: as above, with the server's lock word.
        unsafe { Server::from_parts(self.layout, self.parts(), self.server_locks.as_ptr()) }
    }
}

fn builder() -> loom::model::Builder {
    // `Builder::new` reads LOOM_MAX_PREEMPTIONS, LOOM_MAX_BRANCHES and
    // LOOM_MAX_DURATION from the environment; without them: at most two
    // preemptions per execution, and a time box per test so CI stays bounded
    // (the exploration is exhaustive when it finishes inside the box).
    let mut b = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(2);
    }
    if std::env::var_os("LOOM_MAX_DURATION").is_none() {
        b.max_duration = Some(std::time::Duration::from_secs(60));
    }
    b.max_branches = b.max_branches.max(100_000);
    b
}

/// Serve `calls` calls: each call's single word is answered with word + 1
/// when `reply`, else only checked. Calls alternate between the two ways a
/// server moves packets: whole buffers (`recv`/`send`) and single words
/// (`recv_each_word`/`send_each_word`, the dispatcher's).
fn serve(mem: &Mem, calls: usize, reply: bool) -> Vec<u64> {
    let server = mem.server();
    let mut seen = Vec::new();
    while seen.len() < calls {
        let Some(port) = server.try_open(0..mem.layout.port_count()) else {
            loom::thread::yield_now();
            continue;
        };
        let mut v = 0;
        let by_word = seen.len() % 2 == 1;
        let port = if by_word {
            port.recv_each_word(0..1, |_, _, w| v = w).unwrap()
        } else {
            port.recv(|_, b| v = b.data[0]).unwrap()
        };
        seen.push(v);
        match (reply, by_word) {
            (true, true) => port.send_each_word(1, |_, _| v + 1).unwrap().close(),
            (true, false) => port.send(|_, b| b.data[0] = v + 1).unwrap().close(),
            (false, _) => port.close(),
        }
    }
    seen
}

#[test]
fn two_clients_two_ports_round_trip() {
    builder().check(|| {
        let mem = Mem::new(2);
        let clients: Vec<_> = (0..2u64)
            .map(|i| {
                let mem = mem.clone();
                loom::thread::spawn(move || {
                    let client = mem.client();
                    let port = client.open_from(0x10000, i as u32).send(|b| b.data[0] = 10 * (i + 1));
                    let mut got = 0;
                    let port = port.recv(|b| got = b.data[0]);
                    port.close();
                    assert_eq!(got, 10 * (i + 1) + 1);
                })
            })
            .collect();
        let mut seen = serve(&mem, 2, true);
        for c in clients {
            c.join().unwrap();
        }
        seen.sort();
        assert_eq!(seen, vec![10, 20]);
    });
}

#[test]
fn two_clients_contend_for_one_port() {
    builder().check(|| {
        let mem = Mem::new(1);
        let clients: Vec<_> = (0..2u64)
            .map(|i| {
                let mem = mem.clone();
                loom::thread::spawn(move || {
                    let client = mem.client();
                    let port = client.open_from(0x10000, 0).send(|b| b.data[0] = 10 * (i + 1));
                    let mut got = 0;
                    let port = port.recv(|b| got = b.data[0]);
                    port.close();
                    assert_eq!(got, 10 * (i + 1) + 1);
                })
            })
            .collect();
        let mut seen = serve(&mem, 2, true);
        for c in clients {
            c.join().unwrap();
        }
        seen.sort();
        assert_eq!(seen, vec![10, 20]);
    });
}

/// A reply inline in the server's outbox word, then one in the packet, on
/// the same (only) port: the client gets each value from where it was sent
/// (the inline bits of the first flip must not make the second call skip
/// its packet), and the port ends at rest.
#[test]
fn inline_reply_then_packet_reply_on_one_port() {
    builder().check(|| {
        let mem = Mem::new(1);
        let m2 = mem.clone();
        let client = loom::thread::spawn(move || {
            let client = m2.client();
            let mut got = Vec::new();
            for x in [7u64, 8] {
                let mut v = 0;
                let (port, inline) = client
                    .open_from(0x10000, 0)
                    .send(|b| b.data[0] = x)
                    .recv_reply_words(1, |b| v = b.data[0]);
                port.close();
                got.push((inline, v));
            }
            assert_eq!(got, vec![(Some(8), 0), (None, 9)]);
        });
        let server = mem.server();
        let mut served = 0;
        while served < 2 {
            let Some(port) = server.try_open(0..1) else {
                loom::thread::yield_now();
                continue;
            };
            let mut v = 0;
            let port = port.recv(|_, b| v = b.data[0]).unwrap();
            let port = if served == 0 {
                port.send_inline(v as u32 + 1).unwrap()
            } else {
                port.send(|_, b| b.data[0] = v + 1).unwrap()
            };
            port.close();
            served += 1;
        }
        client.join().unwrap();
        assert!(server.all_idle());
    });
}

/// Fire-and-forget: the client closes right after sending and immediately
/// makes a second call on the same (only) port; the server must see both
/// values, the second only after it handed the port back.
#[test]
fn async_calls_back_to_back() {
    builder().check(|| {
        let mem = Mem::new(1);
        let m2 = mem.clone();
        let client = loom::thread::spawn(move || {
            let client = m2.client();
            client.open_from(0x10000, 0).send(|b| b.data[0] = 1).close();
            client.open_from(0x10000, 0).send(|b| b.data[0] = 2).close();
        });
        let seen = serve(&mem, 2, false);
        client.join().unwrap();
        assert_eq!(seen, vec![1, 2]);
    });
}

/// The server's multi-threaded scan: two server threads scan the same ports;
/// the server-side lock bits must give each call to exactly one of them, and
/// the client must see exactly one answer per call.
#[test]
fn two_server_threads_scan_the_same_ports() {
    builder().check(|| {
        let mem = Mem::new(2);
        let served = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let servers: Vec<_> = (0..2)
            .map(|_| {
                let mem = mem.clone();
                let served = served.clone();
                loom::thread::spawn(move || {
                    let server = mem.server();
                    // Acquire/Release on the counter: only a termination signal
                    // for the model's threads.
                    while served.load(loom::sync::atomic::Ordering::Acquire) < 2 {
                        let Some(port) = server.try_open(0..2) else {
                            loom::thread::yield_now();
                            continue;
                        };
                        let mut v = 0;
                        let port = port.recv(|_, b| v = b.data[0]).unwrap();
                        port.send(|_, b| b.data[0] = v + 1).unwrap().close();
                        // AcqRel: the main thread's final acquire load sees both servers' counts (the joins order them too).
                        served.fetch_add(1, loom::sync::atomic::Ordering::AcqRel);
                    }
                })
            })
            .collect();
        let client = mem.client();
        for (i, v) in [(0u32, 5u64), (1, 7)] {
            let port = client.open_from(0x10000, i).send(|b| b.data[0] = v);
            let mut got = 0;
            port.recv(|b| got = b.data[0]).close();
            assert_eq!(got, v + 1);
        }
        for s in servers {
            s.join().unwrap();
        }
        // Acquire: pairs with the servers' increments (after the joins, which order them anyway).
        assert_eq!(served.load(loom::sync::atomic::Ordering::Acquire), 2);
    });
}
