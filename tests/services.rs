//! End-to-end tests of `#[gpu_rpc]` on the CPU backend: several client
//! threads call the generated client stubs; the generated server adapter runs
//! the host implementation.
//!
//! One file on purpose: every file under `tests/` links a test binary of its
//! own, and the project keeps those few (CI builds them on two cores).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gpu_rpc::cpu::{self, CpuRegion, Launch};
use gpu_rpc::protocol::Layout;
use gpu_rpc::server::{Dispatcher, ServerConfig};
use gpu_rpc::{gpu_rpc, CallError, Status, Wire};

/// A small struct: 9 bytes on the wire.
#[derive(Wire, Clone, Copy, Debug, PartialEq, Default)]
#[repr(C)]
pub struct Point {
    pub x: f32,
    pub y: f32,
    pub tag: u8,
}

/// A struct larger than one packet's payload: 8 + 64 + 1 + 4 = 77 bytes.
#[derive(Wire, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Big {
    pub id: u64,
    pub vals: [u32; 16],
    pub flag: bool,
    pub c: char,
}

/// A 60-byte slice element: elements straddle 64-byte packets.
#[derive(Wire, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Wide {
    pub id: u64,
    pub vals: [u32; 13],
}

fn wide(seed: u64) -> Wide {
    Wide {
        id: seed,
        vals: core::array::from_fn(|i| seed as u32 * 100 + i as u32),
    }
}

/// A tuple struct.
#[derive(Wire, Clone, Copy, Debug, PartialEq, Default)]
#[repr(C)]
pub struct Pair(pub u16, pub i8);

/// One method per argument / result kind.
#[gpu_rpc]
pub trait Kinds {
    #[allow(clippy::too_many_arguments)]
    fn ints(&self, a: u8, b: u16, c: u32, d: u64, e: u128, f: i8, g: i16, h: i32, i: i64, j: i128) -> (u128, i128);
    fn floats(&self, a: f32, b: f64) -> (f64, f32);
    fn logic(&self, b: bool, c: char) -> (bool, char);
    fn unit(&self, u: ()) -> ();
    fn nothing(&self);
    fn arrays(&self, a: [u16; 5]) -> [u16; 5];
    fn tuple(&self, t: (u8, i64, bool)) -> (bool, i64, u8);
    fn option(&self, o: Option<u32>, p: Option<Point>) -> Option<u64>;
    fn point(&self, p: Point) -> Point;
    /// Arguments of 154 bytes (spilled over packets), result of 77.
    fn big(&self, a: Big, b: Big) -> Big;
    fn pair(&self, p: Pair) -> Pair;
    fn sizes(&self, x: usize, y: isize) -> (usize, isize);
    /// Byte length and char count.
    fn text(&self, s: &str) -> (u64, u32);
    fn checksum(&self, data: &[u8]) -> u64;
    fn sum_u32(&self, v: &[u32]) -> u64;
    fn sum_points(&self, v: &[Point]) -> Point;
    fn read_block(&self, offset: u64, out: &mut [u8]) -> usize;
    fn squares(&self, out: &mut [u64]);
    fn fill_points(&self, scale: f32, out: &mut [Point]) -> u32;
    /// Several streams and out-buffers in one method.
    fn mixed(&self, a: &str, b: &[u16], k: u8, out1: &mut [u8], c: &[Wide], out2: &mut [Pair]) -> u32;
    #[gpu_rpc(async)]
    fn log(&self, level: u8, msg: &str);
    /// Ends the calling lane.
    fn finish(&self, code: i32) -> !;
    /// Panics on the host.
    fn boom(&self, msg: &str) -> u32;
}

const TEXT: &[u8] = b"The quick brown fox jumps over the lazy dog. ";

fn text_at(i: u64) -> u8 {
    TEXT[(i % TEXT.len() as u64) as usize]
}

fn fnv64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn big(seed: u64) -> Big {
    Big {
        id: seed,
        vals: core::array::from_fn(|i| (seed as u32).wrapping_mul(31).wrapping_add(i as u32)),
        flag: seed.is_multiple_of(2),
        c: ['a', 'é', '世', '🦀'][(seed % 4) as usize],
    }
}

#[derive(Default)]
struct KindsHost {
    logs: Mutex<Vec<(u8, String)>>,
    finished: Mutex<Vec<i32>>,
    nothing_calls: AtomicUsize,
}

impl Kinds for Arc<KindsHost> {
    fn ints(&self, a: u8, b: u16, c: u32, d: u64, e: u128, f: i8, g: i16, h: i32, i: i64, j: i128) -> (u128, i128) {
        let u = a as u128 + b as u128 + c as u128 + d as u128 + e;
        let s = f as i128 + g as i128 + h as i128 + i as i128 + j;
        (u, s)
    }
    fn floats(&self, a: f32, b: f64) -> (f64, f32) {
        (b * 2.0, a / 2.0)
    }
    fn logic(&self, b: bool, c: char) -> (bool, char) {
        (!b, char::from_u32(c as u32 + 1).unwrap_or('?'))
    }
    fn unit(&self, _u: ()) {}
    fn nothing(&self) {
        // Relaxed: a tally; it is read after the threads that add to it are joined.
        self.nothing_calls.fetch_add(1, Ordering::Relaxed);
    }
    fn arrays(&self, mut a: [u16; 5]) -> [u16; 5] {
        a.reverse();
        a
    }
    fn tuple(&self, t: (u8, i64, bool)) -> (bool, i64, u8) {
        (t.2, -t.1, t.0)
    }
    fn option(&self, o: Option<u32>, p: Option<Point>) -> Option<u64> {
        Some(o? as u64 + p.map(|p| p.tag as u64).unwrap_or(1000))
    }
    fn point(&self, p: Point) -> Point {
        Point {
            x: p.y,
            y: p.x,
            tag: p.tag.wrapping_add(1),
        }
    }
    fn big(&self, a: Big, b: Big) -> Big {
        Big {
            id: a.id + b.id,
            vals: core::array::from_fn(|i| a.vals[i] ^ b.vals[i]),
            flag: a.flag && b.flag,
            c: b.c,
        }
    }
    fn pair(&self, p: Pair) -> Pair {
        Pair(p.0.wrapping_mul(2), -p.1)
    }
    fn sizes(&self, x: usize, y: isize) -> (usize, isize) {
        (x + 1, y - 1)
    }
    fn text(&self, s: &str) -> (u64, u32) {
        (s.len() as u64, s.chars().count() as u32)
    }
    fn checksum(&self, data: &[u8]) -> u64 {
        fnv64(data)
    }
    fn sum_u32(&self, v: &[u32]) -> u64 {
        v.iter().map(|&x| x as u64).sum()
    }
    fn sum_points(&self, v: &[Point]) -> Point {
        v.iter().fold(Point::default(), |a, p| Point {
            x: a.x + p.x,
            y: a.y + p.y,
            tag: a.tag.wrapping_add(p.tag),
        })
    }
    fn read_block(&self, offset: u64, out: &mut [u8]) -> usize {
        for (i, b) in out.iter_mut().enumerate() {
            *b = text_at(offset + i as u64);
        }
        out.len()
    }
    fn squares(&self, out: &mut [u64]) {
        for (i, v) in out.iter_mut().enumerate() {
            *v = (i as u64) * (i as u64);
        }
    }
    fn fill_points(&self, scale: f32, out: &mut [Point]) -> u32 {
        for (i, p) in out.iter_mut().enumerate() {
            *p = Point {
                x: i as f32 * scale,
                y: -(i as f32),
                tag: i as u8,
            };
        }
        out.len() as u32
    }
    fn mixed(&self, a: &str, b: &[u16], k: u8, out1: &mut [u8], c: &[Wide], out2: &mut [Pair]) -> u32 {
        for (i, o) in out1.iter_mut().enumerate() {
            *o = a.as_bytes()[i % a.len().max(1)].wrapping_add(k);
        }
        for (i, o) in out2.iter_mut().enumerate() {
            *o = Pair(b.get(i).copied().unwrap_or(0), c.len() as i8);
        }
        assert!(c.iter().all(|w| *w == wide(w.id)), "wide elements intact");
        b.iter().map(|&x| x as u32).sum::<u32>() + c.iter().map(|x| x.id as u32).sum::<u32>()
    }
    fn log(&self, level: u8, msg: &str) {
        self.logs.lock().unwrap().push((level, msg.to_string()));
    }
    fn finish(&self, code: i32) -> ! {
        self.finished.lock().unwrap().push(code);
        gpu_rpc::lanes::halt()
    }
    fn boom(&self, msg: &str) -> u32 {
        panic!("boom: {msg}")
    }
}

fn quiet() -> Dispatcher {
    Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    })
}

fn kinds_dispatcher() -> (Dispatcher, Arc<KindsHost>) {
    let host = Arc::new(KindsHost::default());
    let mut d = quiet();
    d.add(KindsServer(host.clone())).unwrap();
    (d, host)
}

/// Every value kind crosses both ways, from several threads at once, on a
/// one-lane and on a GPU-shaped (32 lanes per packet) layout.
#[test]
fn every_kind_roundtrips() {
    for (lane_size, ports, servers) in [(1, 3, 2), (32, 2, 1)] {
        let (d, host) = kinds_dispatcher();
        let launch = Launch {
            threads: 6,
            server_threads: servers,
            port_count: ports,
            lane_size,
        };
        let report = cpu::launch(&launch, &d, |client, t| {
            let k = KindsClient::new(client);
            let n = t.id as u64;

            let (u, s) = k.ints(
                u8::MAX,
                u16::MAX,
                u32::MAX,
                u64::MAX,
                u128::MAX / 2,
                i8::MIN,
                i16::MIN,
                i32::MIN,
                i64::MIN,
                -(n as i128),
            );
            assert_eq!(
                u,
                u8::MAX as u128 + u16::MAX as u128 + u32::MAX as u128 + u64::MAX as u128 + u128::MAX / 2
            );
            assert_eq!(
                s,
                i8::MIN as i128 + i16::MIN as i128 + i32::MIN as i128 + i64::MIN as i128 - n as i128
            );

            assert_eq!(k.floats(1.5, -0.25 * n as f64), (-0.5 * n as f64, 0.75));
            let (nan64, nan32) = k.floats(f32::NAN, f64::INFINITY);
            assert!(nan32.is_nan() && nan64 == f64::INFINITY);

            assert_eq!(k.logic(true, 'a'), (false, 'b'));
            assert_eq!(k.logic(false, '🦀'), (true, '🦁'));
            assert_eq!(k.logic(true, '\u{D7FF}'), (false, '?'));

            k.unit(());
            assert_eq!(k.try_unit(()), Ok(()));
            k.nothing();

            assert_eq!(k.arrays([1, 2, 3, 4, n as u16]), [n as u16, 4, 3, 2, 1]);
            assert_eq!(k.tuple((7, -(n as i64), true)), (true, n as i64, 7));
            assert_eq!(k.option(Some(5), None), Some(1005));
            assert_eq!(k.option(Some(5), Some(Point { x: 0.0, y: 0.0, tag: 9 })), Some(14));
            assert_eq!(k.option(None, Some(Point::default())), None);

            let p = Point {
                x: 1.0,
                y: -2.5,
                tag: 255,
            };
            assert_eq!(
                k.point(p),
                Point {
                    x: -2.5,
                    y: 1.0,
                    tag: 0
                }
            );

            let (a, b) = (big(n), big(n + 100));
            let r = k.big(a, b);
            assert_eq!(r.id, 2 * n + 100);
            assert_eq!(r.vals, core::array::from_fn(|i| a.vals[i] ^ b.vals[i]));
            assert_eq!(r.flag, a.flag && b.flag);
            assert_eq!(r.c, b.c);

            assert_eq!(k.pair(Pair(300, -7)), Pair(600, 7));
            assert_eq!(k.sizes(usize::MAX - 1, isize::MIN + 1), (usize::MAX, isize::MIN));

            assert_eq!(k.text(""), (0, 0));
            let s = "héllo, 世界 🦀";
            assert_eq!(k.text(s), (s.len() as u64, s.chars().count() as u32));
            let long: String = (0..1000).map(|i| ['x', 'ß', '中', '🦀'][(i + t.id) % 4]).collect();
            assert_eq!(k.text(&long), (long.len() as u64, 1000));

            assert_eq!(k.checksum(&[]), fnv64(&[]));
            let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + n as u32) as u8).collect();
            assert_eq!(k.checksum(&data), fnv64(&data));

            let v: Vec<u32> = (0..100 + n as u32).map(|i| i * 1_000_000).collect();
            assert_eq!(k.sum_u32(&v), v.iter().map(|&x| x as u64).sum::<u64>());
            assert_eq!(k.sum_u32(&[]), 0);

            let pts: Vec<Point> = (0..20)
                .map(|i| Point {
                    x: i as f32,
                    y: 1.0,
                    tag: i as u8,
                })
                .collect();
            assert_eq!(
                k.sum_points(&pts),
                Point {
                    x: 190.0,
                    y: 20.0,
                    tag: 190
                }
            );

            let mut buf = [0u8; 300];
            assert_eq!(k.read_block(n * 3, &mut buf), 300);
            assert!(buf.iter().enumerate().all(|(i, &b)| b == text_at(n * 3 + i as u64)));
            assert_eq!(k.read_block(0, &mut []), 0);

            let mut sq = vec![u64::MAX; 37 + t.id];
            k.squares(&mut sq);
            assert!(sq.iter().enumerate().all(|(i, &v)| v == (i * i) as u64));

            let mut pts = [Point::default(); 15];
            assert_eq!(k.fill_points(0.5, &mut pts), 15);
            assert!(pts.iter().enumerate().all(|(i, p)| *p
                == Point {
                    x: i as f32 * 0.5,
                    y: -(i as f32),
                    tag: i as u8
                }));

            let mut o1 = [0u8; 70];
            let mut o2 = [Pair::default(); 9];
            let bigs = [wide(1), wide(2), wide(3)];
            let r = k.mixed("abc", &[10, 20, 30], 1, &mut o1, &bigs, &mut o2);
            assert_eq!(r, 60 + 6);
            assert!(o1.iter().enumerate().all(|(i, &b)| b == b"abc"[i % 3] + 1));
            assert_eq!(o2[..3], [Pair(10, 3), Pair(20, 3), Pair(30, 3)]);
            assert!(o2[3..].iter().all(|&p| p == Pair(0, 3)));
        })
        .unwrap();
        assert_eq!(report.errors, 0, "{:?}", d.errors());
        // Relaxed: read after the work that counts is over (joined threads or an ended launch).
        assert_eq!(host.nothing_calls.load(Ordering::Relaxed), 6);
    }
}

/// A 1 MiB `&[u8]` stream arrives intact (checksummed on the host), and a
/// 1 MiB out-buffer comes back intact.
#[test]
fn one_mebibyte_streams() {
    let (d, _host) = kinds_dispatcher();
    let report = cpu::launch(
        &Launch {
            threads: 3,
            server_threads: 2,
            port_count: 2,
            lane_size: 1,
        },
        &d,
        |client, t| {
            let k = KindsClient::new(client);
            let data: Vec<u8> = (0..1u32 << 20)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ t.id as u8)
                .collect();
            assert_eq!(k.try_checksum(&data), Ok(fnv64(&data)));
            let mut out = vec![0u8; 1 << 20];
            assert_eq!(k.read_block(t.id as u64, &mut out), 1 << 20);
            assert!(out
                .iter()
                .enumerate()
                .all(|(i, &b)| b == text_at(t.id as u64 + i as u64)));
        },
    )
    .unwrap();
    assert_eq!(report.calls, 6);
    assert_eq!(report.errors, 0);
}

/// Run `kernel` as one lane on `region`'s single port and return the parity
/// of the packets the client sent (its outbox flips once per packet), after
/// checking the run logged no error.
fn packets_parity(region: &CpuRegion, d: &Dispatcher, kernel: impl Fn(&KindsClient<'_, '_>) + Sync) -> u32 {
    let one = Launch {
        threads: 1,
        server_threads: 1,
        port_count: 1,
        lane_size: 1,
    };
    let before = region.server().snapshot(0).client_outbox;
    let report = cpu::launch_with_region(region, &one, d, |c, _| kernel(&KindsClient::new(c))).unwrap();
    assert_eq!(report.errors, 0);
    region.server().snapshot(0).client_outbox ^ before
}

/// Slices of [`DIRECT_MIN_BYTES`](gpu_rpc::call::DIRECT_MIN_BYTES) and more
/// whose elements are laid out as encoded go by address (the server copies
/// them from the lane's memory and stores out-buffers there), every byte
/// right, at sizes around the threshold, odd lengths, up to the 64 MiB
/// limit, and for elements of 1, 2, 4 and 8 bytes; encoded elements
/// (`Point`, `Wide`, `Pair`) and short slices keep the packets, in the same
/// calls. Which way a slice went shows in how many packets the client sent
/// (the parity of its outbox): a direct slice is one packet (its address).
#[test]
fn large_slices_go_by_address() {
    use gpu_rpc::call::DIRECT_MIN_BYTES;
    let (d, _host) = kinds_dispatcher();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let bytes = |n: usize, salt: u8| -> Vec<u8> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 11) as u8 ^ salt)
            .collect()
    };
    // (size, packets the client sends for `checksum`: the frame, then the
    // address or the slice's packets)
    let t = DIRECT_MIN_BYTES;
    for (n, packets) in [
        (t - 1, 1 + (t - 1).div_ceil(64)),
        (t, 2),
        (t + 1, 2),
        (4096 + 7, 2),
        (65_537, 2),
        ((1 << 20) + 3, 2),
        (64 << 20, 2),
    ] {
        let data = bytes(n, n as u8);
        let flips = packets_parity(&region, &d, |k| {
            assert_eq!(k.checksum(&data), fnv64(&data), "{n} bytes")
        });
        assert_eq!(
            flips as usize,
            packets & 1,
            "{n} bytes: the client sent {packets} packet(s)"
        );
    }
    // Several lanes at once, elements of several sizes, both directions.
    let report = cpu::launch(
        &Launch {
            threads: 4,
            server_threads: 2,
            port_count: 2,
            lane_size: 1,
        },
        &d,
        |client, th| {
            let k = KindsClient::new(client);
            let id = th.id as u64;
            for n in [0usize, 1, 511, 512, 513, 4099, 100_003] {
                let v: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9) ^ id as u32).collect();
                assert_eq!(k.sum_u32(&v), v.iter().map(|&x| x as u64).sum::<u64>(), "{n} u32s");
                let mut sq = vec![7u64; n];
                k.squares(&mut sq);
                assert!(
                    sq.iter().enumerate().all(|(i, &x)| x == (i as u64) * (i as u64)),
                    "{n} squares"
                );
                let mut block = vec![0u8; 3 * n + 1];
                assert_eq!(k.read_block(id * 3, &mut block), block.len());
                assert!(block.iter().enumerate().all(|(i, &b)| b == text_at(id * 3 + i as u64)));
            }
            // One call mixing direct and packet slices: a long text and
            // `u16`s and a long `u8` out-buffer go direct; the `Wide`s and
            // `Pair`s are encoded element by element.
            let text: String = (0..5000)
                .map(|i| (b'a' + (i % 26) as u8 + id as u8 % 3) as char)
                .collect();
            let halves: Vec<u16> = (0..3001u32).map(|i| (i * 31 + id as u32) as u16).collect();
            let wides: Vec<Wide> = (0..40).map(|i| wide(i + id)).collect();
            let mut out1 = vec![0u8; 9000];
            let mut out2 = vec![Pair(0, 0); 300];
            let r = k.mixed(&text, &halves, 3, &mut out1, &wides, &mut out2);
            let host = Arc::new(KindsHost::default());
            let (mut e1, mut e2) = (vec![0u8; 9000], vec![Pair(0, 0); 300]);
            assert_eq!(r, Kinds::mixed(&host, &text, &halves, 3, &mut e1, &wides, &mut e2));
            assert_eq!((out1, out2), (e1, e2));
        },
    )
    .unwrap();
    assert_eq!(report.errors, 0);
}

/// A fire-and-forget call never sends a slice by address, however long:
/// the lane goes on (and may free or reuse the slice) before the host gets
/// to it. A 2900-byte message is 46 packets after the frame (the client's
/// outbox flips an odd number of times; by address it would be 2, even),
/// and arrives whole although the lane dropped it at once.
#[test]
fn fire_and_forget_slices_stay_in_packets() {
    let (d, host) = kinds_dispatcher();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let text: String = (0..2900).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let flips = packets_parity(&region, &d, |k| {
        let msg = text.clone();
        k.log(7, &msg);
        drop(msg);
        // Overwrite what the allocator hands out next.
        let _noise = vec![0xffu8; 2900];
    });
    assert_eq!(flips, 1, "47 packets: frame and 46 of the message");
    assert_eq!(*host.logs.lock().unwrap(), [(7, text)]);
}

/// A method's one stream, when it fits in packet 0 after the argument
/// block, rides with the frame: the client sends one packet per call instead
/// of two (its outbox flips once). That holds for `&str`, `&[u8]` and encoded
/// elements (`&[Point]`, 9 bytes each); a byte more and it goes in a packet
/// of its own, as the streams of a method with several always do. Every byte
/// arrives either way.
#[test]
fn short_streams_ride_with_the_frame() {
    let (d, _host) = kinds_dispatcher();
    let region = CpuRegion::new(Layout::new(1, 1).unwrap());
    let launch = Launch {
        threads: 1,
        server_threads: 1,
        port_count: 1,
        lane_size: 1,
    };
    let line: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let text48 = &line[..48];
    let points = |n: u8| -> Vec<Point> {
        (0..n)
            .map(|i| Point {
                x: i as f32,
                y: 1.0,
                tag: i,
            })
            .collect()
    };
    type Case = (&'static str, u32, Box<dyn Fn(&KindsClient<'_, '_>) + Sync>);
    let cases: Vec<Case> = vec![
        // `text`: an 8-byte block (the length), room for 48 bytes.
        (
            "text, 48 bytes",
            1,
            Box::new(|k| assert_eq!(k.text(std::str::from_utf8(text48).unwrap()), (48, 48))),
        ),
        (
            "text, 49 bytes",
            2,
            Box::new(|k| assert_eq!(k.text(std::str::from_utf8(&line[..49]).unwrap()), (49, 49))),
        ),
        ("text, empty", 1, Box::new(|k| assert_eq!(k.text(""), (0, 0)))),
        (
            "checksum, 48 bytes",
            1,
            Box::new(|k| assert_eq!(k.checksum(text48), fnv64(text48))),
        ),
        (
            "checksum, 49 bytes",
            2,
            Box::new(|k| assert_eq!(k.checksum(&line[..49]), fnv64(&line[..49]))),
        ),
        (
            "5 points, 45 bytes",
            1,
            Box::new(move |k| assert_eq!(k.sum_points(&points(5)).tag, 10)),
        ),
        (
            "6 points, 54 bytes",
            2,
            Box::new(move |k| assert_eq!(k.sum_points(&points(6)).tag, 15)),
        ),
        // `mixed` has three streams: a frame, then a packet per non-empty one.
        (
            "mixed, 3 + 0 + 0 bytes",
            2,
            Box::new(|k| {
                let (mut o1, mut o2) = ([0u8; 4], [Pair(0, 0); 2]);
                assert_eq!(k.mixed("abc", &[], 1, &mut o1, &[], &mut o2), 0);
                assert_eq!(o1, *b"bcdb");
            }),
        ),
        (
            "mixed, 9 + 2 + 0 bytes",
            3,
            Box::new(|k| {
                let (mut o1, mut o2) = ([0u8; 3], [Pair(0, 0); 2]);
                assert_eq!(k.mixed("abcdefghi", &[7], 0, &mut o1, &[], &mut o2), 7);
                assert_eq!((o1, o2), (*b"abc", [Pair(7, 0), Pair(0, 0)]));
            }),
        ),
    ];
    for (name, packets, call) in &cases {
        let before = region.server().snapshot(0).client_outbox;
        let report = cpu::launch_with_region(&region, &launch, &d, |c, _| call(&KindsClient::new(c))).unwrap();
        assert_eq!(report.errors, 0, "{name}");
        let flips = region.server().snapshot(0).client_outbox ^ before;
        assert_eq!(flips, packets & 1, "{name}: the client sent {packets} packet(s)");
    }
}

/// Fire-and-forget calls all reach the host.
#[test]
fn async_calls_arrive() {
    let (d, host) = kinds_dispatcher();
    let region = CpuRegion::new(Layout::new(4, 1).unwrap());
    let launch = Launch {
        threads: 8,
        server_threads: 2,
        port_count: 4,
        lane_size: 1,
    };
    let report = cpu::launch_with_region(&region, &launch, &d, |client, t| {
        let k = KindsClient::new(client);
        for i in 0..50u8 {
            k.log(i, &format!("thread {} message {i} ✓", t.id));
        }
    })
    .unwrap();
    assert_eq!(report.calls, 400);
    assert!(region.is_quiescent());
    let logs = host.logs.lock().unwrap();
    assert_eq!(logs.len(), 400);
    for t in 0..8 {
        let mine: Vec<_> = logs
            .iter()
            .filter(|(_, m)| m.starts_with(&format!("thread {t} ")))
            .collect();
        assert_eq!(mine.len(), 50);
        // Fire-and-forget calls of one thread may be served out of order
        // (different ports, several server threads), but each arrives once.
        let mut levels: Vec<u8> = mine.iter().map(|(l, _)| *l).collect();
        levels.sort();
        assert_eq!(levels, (0..50).collect::<Vec<u8>>());
        for (level, m) in mine {
            assert_eq!(*m, format!("thread {t} message {level} ✓"));
        }
    }
}

/// A `-> !` method runs on the host (which ends with `lanes::halt()`), then
/// the device stub halts the lane: nothing after the call runs, and the CPU
/// backend counts the halted lanes.
#[test]
fn never_method_halts_the_lane() {
    let (d, host) = kinds_dispatcher();
    let after = AtomicUsize::new(0);
    let report = cpu::launch(
        &Launch {
            threads: 5,
            server_threads: 1,
            port_count: 2,
            lane_size: 1,
        },
        &d,
        |client, t| {
            let k = KindsClient::new(client);
            assert_eq!(k.add_one_via_sizes(t.id), t.id + 1);
            if t.id != 4 {
                k.finish(t.id as i32 * 10);
            }
            // Relaxed: a tally; it is read after the threads that add to it are joined.
            after.fetch_add(1, Ordering::Relaxed);
        },
    )
    .unwrap();
    assert_eq!(report.halted, 4);
    assert_eq!(after.load(Ordering::Relaxed), 1);
    assert_eq!(report.errors, 0);
    let mut codes = host.finished.lock().unwrap().clone();
    codes.sort();
    assert_eq!(codes, [0, 10, 20, 30]);
}

trait AddOne {
    fn add_one_via_sizes(&self, x: usize) -> usize;
}
impl AddOne for KindsClient<'_, '_> {
    fn add_one_via_sizes(&self, x: usize) -> usize {
        self.sizes(x, 0).0
    }
}

/// A method whose host implementation panics: the `try_` form gets
/// `HandlerPanicked`, the server logs the method and message, and keeps
/// serving; the panicking form fails the lane with the error's message.
#[test]
fn handler_panic_is_reported() {
    let (d, _host) = kinds_dispatcher();
    let report = cpu::launch(
        &Launch {
            threads: 2,
            server_threads: 1,
            port_count: 1,
            lane_size: 1,
        },
        &d,
        |client, _| {
            let k = KindsClient::new(client);
            let e = k.try_boom("kaput").unwrap_err();
            assert_eq!(e.status, Status::HandlerPanicked);
            assert_eq!(e.desc, KindsRpc::BOOM);
            assert!(e.to_string().contains("Kinds::boom"), "{e}");
            // The next call works.
            assert_eq!(k.pair(Pair(1, 1)), Pair(2, -1));
        },
    )
    .unwrap();
    assert_eq!(report.errors, 2);
    let errors = d.errors();
    assert_eq!(errors.len(), 2);
    for e in &errors {
        assert_eq!(e.status, Status::HandlerPanicked);
        assert_eq!(e.method, Some("Kinds::boom"));
        assert_eq!(e.opcode, KindsRpc::BOOM.opcode);
        assert_eq!(e.lane, Some(0));
        assert!(
            e.message.contains("Kinds::boom") && e.message.contains("boom: kaput"),
            "{}",
            e.message
        );
    }

    // The panicking form ends the client thread with the call error.
    let err = cpu::launch(
        &Launch {
            threads: 1,
            server_threads: 1,
            port_count: 1,
            lane_size: 1,
        },
        &d,
        |client, _| {
            KindsClient::new(client).boom("again");
        },
    )
    .unwrap_err();
    assert!(
        err.message.contains("Kinds::boom") && err.message.contains("panicked"),
        "{}",
        err.message
    );
}

/// A service the dispatcher does not serve.
#[gpu_rpc]
pub trait Unregistered {
    fn missing(&self, x: u32) -> u32;
    fn missing_stream(&self, data: &[u8], out: &mut [u16]);
}

/// A call to an opcode no service has: `UnknownOpcode`, an error naming the
/// opcode, port and method-less call; the server keeps serving.
#[test]
fn unknown_opcode_is_answered() {
    let (d, _host) = kinds_dispatcher();
    let report = cpu::launch(
        &Launch {
            threads: 3,
            server_threads: 1,
            port_count: 2,
            lane_size: 1,
        },
        &d,
        |client, t| {
            let u = UnregisteredClient::new(client);
            let e = u.try_missing(t.id as u32).unwrap_err();
            assert_eq!(e.status, Status::UnknownOpcode);
            assert_eq!(e.desc.opcode, UnregisteredRpc::MISSING.opcode);
            // Streams and out-buffers of an unknown call are consumed; the out
            // buffer is left as it was.
            let mut out = [7u16; 100];
            let e = u.try_missing_stream(&[1; 5000], &mut out).unwrap_err();
            assert_eq!(e.status, Status::UnknownOpcode);
            assert!(out.iter().all(|&x| x == 7));
            assert_eq!(KindsClient::new(client).sizes(1, 1), (2, 0));
        },
    )
    .unwrap();
    assert_eq!(report.errors, 6);
    let errors = d.errors();
    let e = errors
        .iter()
        .find(|e| e.opcode == UnregisteredRpc::MISSING.opcode)
        .unwrap();
    assert_eq!(e.status, Status::UnknownOpcode);
    let text = e.to_string();
    assert!(
        text.contains(&format!("{:#010x}", UnregisteredRpc::MISSING.opcode)),
        "{text}"
    );
    assert!(text.contains("port"), "{text}");
}

/// A failed call through the panicking stub panics at the caller's line,
/// not inside gpu_rpc (the stubs and `fail` are `#[track_caller]`).
#[test]
fn failed_call_panics_at_the_callers_line() {
    static SEEN: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload().downcast_ref::<String>().cloned().unwrap_or_default();
        match info.location() {
            Some(at) if msg.contains("Unregistered::missing") => {
                SEEN.lock().unwrap().push((at.file().to_string(), at.line()))
            }
            _ => default(info),
        }
    }));
    let (d, _host) = kinds_dispatcher();
    let call_line = std::sync::atomic::AtomicU32::new(0);
    let err = cpu::launch(
        &Launch {
            threads: 1,
            server_threads: 1,
            port_count: 1,
            lane_size: 1,
        },
        &d,
        |client, _| {
            // Relaxed: read by this thread only, after the call.
            call_line.store(line!() + 1, Ordering::Relaxed);
            UnregisteredClient::new(client).missing(7);
        },
    )
    .unwrap_err();
    assert!(err.message.contains("unknown opcode"), "{}", err.message);
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(
        seen,
        // Relaxed: read after the work that counts is over (joined threads or an ended launch).
        vec![(file!().to_string(), call_line.load(Ordering::Relaxed))],
        "the panic must name the caller's file and line"
    );
}

// Only the client side of v1 is used: a "kernel" built from an old
// definition.
#[allow(dead_code)]
mod v1 {
    use gpu_rpc::gpu_rpc;
    #[gpu_rpc]
    pub trait Versioned {
        fn get(&self, x: u32) -> u32;
    }
}

mod v2 {
    use gpu_rpc::gpu_rpc;
    /// Same name, same opcode, another argument type.
    #[gpu_rpc]
    pub trait Versioned {
        fn get(&self, x: u64) -> u32;
    }
    pub struct Host;
    impl Versioned for Host {
        fn get(&self, x: u64) -> u32 {
            x as u32
        }
    }
}

/// Two traits of one name in different modules have the same hashed
/// opcodes: serving both is refused, and the error tells them apart.
#[test]
fn same_named_traits_are_told_apart() {
    struct Old;
    impl v1::Versioned for Old {
        fn get(&self, x: u32) -> u32 {
            x
        }
    }
    let mut d = quiet();
    d.add(v2::VersionedServer(v2::Host)).unwrap();
    let e = d.add(v1::VersionedServer(Old)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "gpu_rpc: opcode {:#010x} is claimed by both services::v2::Versioned::get and services::v1::Versioned::get",
            v1::VersionedRpc::GET.opcode
        )
    );
}

/// A kernel and a host built from different definitions of a method share
/// the opcode but not the signature: the call is refused, not misread.
#[test]
fn signature_mismatch_is_refused() {
    assert_eq!(v1::VersionedRpc::GET.opcode, v2::VersionedRpc::GET.opcode);
    assert_ne!(v1::VersionedRpc::GET.signature, v2::VersionedRpc::GET.signature);
    let mut d = quiet();
    d.add(v2::VersionedServer(v2::Host)).unwrap();
    cpu::launch(
        &Launch {
            threads: 2,
            ..Launch::default()
        },
        &d,
        |client, _| {
            let e = v1::VersionedClient::new(client).try_get(5).unwrap_err();
            assert_eq!(e.status, Status::SignatureMismatch);
            assert_eq!(v2::VersionedClient::new(client).try_get(5), Ok(5));
        },
    )
    .unwrap();
}

#[gpu_rpc]
pub trait First {
    #[gpu_rpc(opcode = 0x2_0000)]
    fn one(&self) -> u32;
    #[gpu_rpc(opcode = 0x2_0001)]
    fn two(&self, x: u8);
}

#[gpu_rpc]
pub trait Second {
    #[gpu_rpc(opcode = 0x2_0001)]
    fn clash(&self);
}

#[gpu_rpc(namespace = "other_crate")]
pub trait Third {
    fn one(&self) -> u32;
}

struct Impl;
impl First for Impl {
    fn one(&self) -> u32 {
        1
    }
    fn two(&self, _x: u8) {}
}
impl Second for Impl {
    fn clash(&self) {}
}
impl Third for Impl {
    fn one(&self) -> u32 {
        3
    }
}

// Disjoint services, checked at compile time.
const _: () = gpu_rpc::assert_disjoint_opcodes(&[FirstRpc::OPCODES, ThirdRpc::OPCODES, KindsRpc::OPCODES]);

/// `Dispatcher::add` refuses a service whose opcode is taken.
#[test]
fn colliding_opcodes_are_refused() {
    let mut d = quiet();
    d.add(FirstServer(Impl)).unwrap();
    let e = match d.add(SecondServer(Impl)).unwrap_err() {
        gpu_rpc::server::AddError::Collision(e) => e,
        other => panic!("{other}"),
    };
    assert_eq!(e.opcode, 0x2_0001);
    assert_eq!(e.first, "services::First::two");
    assert_eq!(e.second, "services::Second::clash");
    d.add(ThirdServer(Impl)).unwrap();
    cpu::launch(
        &Launch {
            threads: 2,
            ..Launch::default()
        },
        &d,
        |client, _| {
            assert_eq!(FirstClient::new(client).one(), 1);
            FirstClient::new(client).two(9);
            assert_eq!(ThirdClient::new(client).one(), 3);
        },
    )
    .unwrap();
}

/// The opcode scheme: hashed opcodes are `fnv1a("Trait::method") |
/// 0x8000_0000`, or with the namespace prefixed; explicit ones as given.
#[test]
fn opcode_scheme() {
    use gpu_rpc::wire::{fnv1a, SCHEMA_SEED};
    let hashed = |s: &str| fnv1a(SCHEMA_SEED, s.as_bytes()) | 0x8000_0000;
    assert_eq!(KindsRpc::TEXT.opcode, hashed("Kinds::text"));
    assert_eq!(ThirdRpc::ONE.opcode, hashed("other_crate::Third::one"));
    assert_eq!(FirstRpc::ONE.opcode, 0x2_0000);
    assert_eq!(FirstRpc::OPCODES, &[0x2_0000, 0x2_0001]);
    assert_eq!(KindsRpc::OPCODES.len(), 23);
    assert_eq!(KindsRpc::OPCODES[0], KindsRpc::INTS.opcode);
    assert_eq!(KindsRpc::SERVICE, "Kinds");
    assert_eq!(KindsRpc::METHODS.len(), 23);
    assert_eq!(KindsRpc::METHODS[16].path, "Kinds::read_block");
    assert!(std::ptr::eq(KindsRpc::METHODS[16].desc, KindsRpc::READ_BLOCK));
}

/// What the call descriptions say about each method's layout.
#[test]
fn call_descriptions() {
    let d = KindsRpc::MIXED;
    assert_eq!((d.service, d.method), ("Kinds", "mixed"));
    assert!(d.reply);
    assert_eq!(d.in_streams, 3);
    assert_eq!(d.out_elem_sizes, &[1, 3]);
    assert_eq!(Wide::SIZE, 60);
    assert_eq!(d.arg_bytes, 1);
    assert_eq!(d.ret_bytes, 4);
    assert_eq!(d.block_len(), 8 * 5 + 1);
    assert_eq!(KindsRpc::BIG.arg_bytes, 154);
    assert_eq!(KindsRpc::BIG.ret_bytes, 77);
    assert!(!KindsRpc::LOG.reply);
    assert_eq!(KindsRpc::FINISH.ret_bytes, 0);
    assert_eq!(KindsRpc::INTS.arg_bytes, 1 + 2 + 4 + 8 + 16 + 1 + 2 + 4 + 8 + 16);
    // Signatures differ between methods of identical shape.
    assert_ne!(KindsRpc::UNIT.signature, KindsRpc::NOTHING.signature);
}

/// Same-shaped structs with different names have different schemas; the
/// derive encodes fields back to back.
#[test]
fn derive_wire_layout() {
    #[derive(Wire, Debug, PartialEq)]
    #[repr(C)]
    struct A {
        x: u8,
        y: u32,
    }
    #[derive(Wire, Debug, PartialEq)]
    #[repr(C)]
    struct B {
        x: u8,
        y: u32,
    }
    #[derive(Wire, Debug, PartialEq)]
    #[repr(C, align(16))]
    struct Generic<T, const N: usize> {
        items: [T; N],
        last: Option<T>,
    }
    #[derive(Wire, Debug, PartialEq)]
    #[repr(C)]
    struct Unit;
    #[derive(Wire, Debug, PartialEq)]
    #[repr(C)]
    struct Empty {}

    assert_eq!(A::SIZE, 5);
    assert_ne!(A::SCHEMA, B::SCHEMA);
    let mut buf = [0u8; 5];
    gpu_rpc::wire::encode(&A { x: 1, y: 0x0403_0201 }, &mut buf);
    assert_eq!(buf, [1, 1, 2, 3, 4]);
    assert_eq!(gpu_rpc::wire::decode::<A>(&buf), Ok(A { x: 1, y: 0x0403_0201 }));

    type G = Generic<char, 3>;
    assert_eq!(G::SIZE, 12 + 5);
    assert_ne!(G::SCHEMA, <Generic<u32, 3>>::SCHEMA);
    let g = G {
        items: ['a', '🦀', 'z'],
        last: Some('é'),
    };
    let mut buf = [0u8; 17];
    gpu_rpc::wire::encode(&g, &mut buf);
    assert_eq!(gpu_rpc::wire::decode::<G>(&buf), Ok(g));
    // Invalid values are refused on decode.
    buf[7] = 0xff; // the second char is now over 0x10ffff
    assert!(gpu_rpc::wire::decode::<G>(&buf).is_err());
    assert_eq!(
        G::zeroed(),
        G {
            items: ['\0'; 3],
            last: None
        }
    );

    assert_eq!(Unit::SIZE, 0);
    assert_eq!(gpu_rpc::wire::decode::<Unit>(&[]), Ok(Unit));
    assert_eq!(Empty::SIZE, 0);
    assert_eq!(Big::SIZE, 77);
    assert_eq!(Pair::SIZE, 3);
    assert_eq!(Point::SIZE, 9);
}

/// Many threads and few ports, mixing stream sizes: every answer exact.
#[test]
fn contended_mixed_calls() {
    let (d, _host) = kinds_dispatcher();
    let total = AtomicU64::new(0);
    let launch = Launch {
        threads: 12,
        server_threads: 3,
        port_count: 3,
        lane_size: 1,
    };
    let report = cpu::launch(&launch, &d, |client, t| {
        let k = KindsClient::new(client);
        for i in 0..60u32 {
            let v: Vec<u32> = (0..(i * 13 + t.id as u32) % 97).collect();
            let s = k.sum_u32(&v);
            assert_eq!(s, v.iter().map(|&x| x as u64).sum::<u64>());
            let mut buf = vec![0u8; (i as usize * 7) % 200];
            assert_eq!(k.read_block(i as u64, &mut buf), buf.len());
            assert!(buf.iter().enumerate().all(|(j, &b)| b == text_at(i as u64 + j as u64)));
            // Relaxed: a tally; it is read after the threads that add to it are joined.
            total.fetch_add(1, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert_eq!(total.load(Ordering::Relaxed), 720);
    assert_eq!(report.calls, 1440);
    assert_eq!(report.errors, 0);
}

/// The client stub's error type is the runtime's.
#[test]
fn call_error_display() {
    let e = CallError {
        status: Status::UnknownOpcode,
        detail: 0,
        desc: UnregisteredRpc::MISSING,
    };
    assert!(e.to_string().contains("Unregistered::missing"));
}

/// A service with a hand-made description the frame cannot carry (an
/// out-buffer element of 100 bytes, which once reached a division by zero
/// in the server) is refused by `Dispatcher::add`, and so is one whose two
/// methods share an opcode; nothing of it is registered.
#[test]
fn invalid_hand_made_descriptions_are_refused_by_add() {
    use gpu_rpc::call::{CallDesc, NOOP_DESC};
    use gpu_rpc::server::{AddError, MethodInfo, ServerCall, Service};
    static BAD: CallDesc = CallDesc {
        opcode: 0x7_0000,
        out_elem_sizes: &[100],
        ..NOOP_DESC
    };
    static GOOD: CallDesc = CallDesc {
        opcode: 0x7_0001,
        ..NOOP_DESC
    };
    struct Hand(&'static [MethodInfo]);
    impl Service for Hand {
        fn name(&self) -> &'static str {
            "Hand"
        }
        fn methods(&self) -> &'static [MethodInfo] {
            self.0
        }
        fn dispatch(&self, _: usize, _: &mut ServerCall<'_>) {
            unreachable!("never registered")
        }
    }
    static BAD_METHODS: [MethodInfo; 2] = [
        MethodInfo {
            desc: &GOOD,
            path: "Hand::good",
            module: "tests",
        },
        MethodInfo {
            desc: &BAD,
            path: "Hand::bad",
            module: "tests",
        },
    ];
    static TWINS: [MethodInfo; 2] = [
        MethodInfo {
            desc: &GOOD,
            path: "Hand::a",
            module: "tests",
        },
        MethodInfo {
            desc: &GOOD,
            path: "Hand::b",
            module: "tests",
        },
    ];
    let mut d = quiet();
    let e = d.add(Hand(&BAD_METHODS)).unwrap_err();
    assert_eq!(
        e,
        AddError::InvalidMethod {
            path: "Hand::bad",
            problem: "gpu_rpc: out-buffer elements must be 1..=64 bytes"
        }
    );
    assert_eq!(
        e.to_string(),
        "gpu_rpc: out-buffer elements must be 1..=64 bytes (method Hand::bad)"
    );
    let e = d.add(Hand(&TWINS)).unwrap_err();
    assert!(
        e.to_string()
            .contains("claimed by both tests::Hand::a and tests::Hand::b"),
        "{e}"
    );
    // Neither attempt left `Hand::good`'s opcode behind.
    d.add(Hand(&BAD_METHODS[..1])).unwrap();
}
