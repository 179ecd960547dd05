//! The randomized conformance suite of issue 12 on the CPU backend (what CI
//! runs; `gpu_conform` runs the same programs on a GPU): 64 client threads
//! run the programs of several seeds through the generated `Conform` stubs
//! against the host implementation, which checks every call online against
//! the model; afterwards every lane's published results, its fire-and-forget
//! notes and the server log must match the model exactly.
//!
//! On this backend every client thread is a one-lane warp, so it checks the
//! programs, the interpreter, the model and the host implementation against
//! each other and the protocol under many threads and few ports, but not how
//! lanes of one warp diverge (that is what the GPU run is for). The last two
//! tests check that the checker notices a wrong call and a wrong result.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gpu_example_services::conform::{run_lane, Call, Method, Model, Program, Scratch, Want, METHODS, RESULT_WORDS};
use gpu_example_services::{Conform, ConformClient, ConformServer};
use gpu_examples::{ConformHost, Verdict};
use gpu_rpc::cpu::{self, Launch};
use gpu_rpc::server::{Dispatcher, ServerConfig};

/// Top-level ops per lane.
const STEPS: u32 = 24;

/// Run the programs of `seed` on `threads` client threads; returns the
/// verdict and the number of lanes the backend saw halt.
fn run_seed(seed: u64, threads: usize, ports: u32, server_threads: usize) -> (Verdict, usize) {
    let host = Arc::new(ConformHost::new(seed, STEPS, threads));
    let mut d = Dispatcher::new(ServerConfig {
        log_errors: false,
        ..ServerConfig::default()
    });
    d.add(ConformServer(Arc::clone(&host))).expect("one service");
    let results: Vec<AtomicU64> = (0..threads * RESULT_WORDS).map(|_| AtomicU64::new(u64::MAX)).collect();
    let report = cpu::launch(
        &Launch {
            threads,
            server_threads,
            port_count: ports,
            lane_size: 1,
        },
        &d,
        |client, t| {
            let conform = ConformClient::new(client);
            run_lane(&conform, seed, t.id as u32, STEPS, |r| {
                for (i, w) in r.to_words().into_iter().enumerate() {
                    // Relaxed: read after `cpu::launch` has joined every client thread.
                    results[t.id * RESULT_WORDS + i].store(w, Ordering::Relaxed);
                }
            });
        },
    )
    .expect("no client thread panicked");
    // Relaxed: every client thread has been joined.
    let results: Vec<u64> = results.iter().map(|w| w.load(Ordering::Relaxed)).collect();
    let verdict = host.verify(&results, &d);
    assert_eq!(report.errors, 0, "seed {seed}: server errors: {:?}", verdict.messages);
    (verdict, report.halted)
}

#[test]
fn random_programs_match_the_model() {
    let mut total = Verdict::default();
    for (seed, ports, servers) in [(1, 8, 2), (2, 64, 1), (3, 3, 2), (0xdead_beef, 16, 3)] {
        let (v, halted) = run_seed(seed, 64, ports, servers);
        assert!(v.ok(), "seed {seed}: {}", v.problem().unwrap_or_default());
        assert_eq!(halted as u64, v.halted(), "seed {seed}: halted lanes");
        assert_eq!(v.served, v.lane_calls, "seed {seed}");
        total.lane_calls += v.lane_calls;
        for i in 0..METHODS {
            total.per_method[i] += v.per_method[i];
        }
        for i in 0..3 {
            total.ends[i] += v.ends[i];
        }
    }
    eprintln!(
        "conform_cpu: {} lane-calls, per method {:?}, ends {:?}",
        total.lane_calls, total.per_method, total.ends
    );
    // The programs exercise what they are meant to: every method, and every
    // way a program ends.
    for (i, n) in total.per_method.iter().enumerate() {
        assert!(*n > 0, "no call of method {i}: {:?}", total.per_method);
    }
    assert!(total.ends.iter().all(|&n| n > 0), "ends {:?}", total.ends);
    assert!(total.lane_calls > 2000, "{} lane-calls", total.lane_calls);
}

/// Every method occurs, long strings occur, the lanes' program lengths vary,
/// and lanes of a group share their programs' shape: the generator is not
/// degenerate.
#[test]
fn programs_cover_the_control_flow() {
    let mut scratch = Scratch::default();
    let mut lengths = std::collections::BTreeSet::new();
    let mut kinds = [0u64; METHODS];
    let mut long_texts = 0;
    let mut acks = [0u32; 2];
    for gid in 0..256 {
        let mut m = Model::new(7, gid, STEPS);
        let mut n = 0;
        while let Some((step, want)) = m.next_call(&mut scratch) {
            assert_eq!(step, n, "steps are consecutive");
            n += 1;
            match want {
                Want::Call(c) => {
                    kinds[c.method() as usize] += 1;
                    if let Call::Text { len, .. } = c {
                        long_texts += (len > 200) as u32;
                    }
                    // Both forms of an `ack` reply: small enough to go
                    // inline, and too large.
                    if let Call::Ack { x } = c {
                        acks[(x > gpu_rpc::protocol::INLINE_MAX) as usize] += 1;
                    }
                }
                Want::Finish => kinds[Method::Finish as usize] += 1,
            }
        }
        assert_eq!(m.result().expect("drained").calls, n);
        lengths.insert(n);
    }
    assert!(lengths.len() > 20, "lane lengths {lengths:?}");
    assert!(acks.iter().all(|&n| n > 0), "acks (inline, in the packet) {acks:?}");
    // Lanes of one group share the shape of their programs: their first
    // calls (made at the same op, unless the lane left at once) are of one
    // method; across groups the methods differ.
    let mut sizes = std::collections::BTreeSet::new();
    let mut first_methods = std::collections::BTreeSet::new();
    let mut gid = 0;
    while gid < 1024 {
        let size = Program::new(7, gid).group_size();
        sizes.insert(size);
        let mut methods = std::collections::BTreeSet::new();
        for g in gid..gid + size {
            let mut m = Model::new(7, g, STEPS);
            if let Some((0, Want::Call(c))) = m.next_call(&mut scratch) {
                methods.insert(c.method() as u8);
            }
        }
        assert!(
            methods.len() <= 1,
            "group of {size} at gid {gid}: first methods {methods:?}"
        );
        first_methods.extend(methods);
        gid += size;
    }
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [1, 4, 8, 32]);
    assert!(first_methods.len() >= 4, "{first_methods:?}");
    assert!(kinds.iter().all(|&k| k > 0), "{kinds:?}");
    assert!(long_texts > 0, "some strings span several packets");
}

/// A lane that makes a wrong call is reported, naming the lane and the step.
#[test]
fn checker_reports_a_wrong_call() {
    let host = ConformHost::new(5, STEPS, 2);
    let d = Dispatcher::new(ServerConfig::default());
    // Lane 0 says it is at step 3 on its first call.
    let _ = host.text(0, 3, "hello");
    let v = host.verify(&[0; 2 * RESULT_WORDS], &d);
    assert!(!v.ok());
    assert_eq!(v.bad_lanes, 2, "lane 0's call, lane 1's missing calls");
    assert!(
        v.messages[0].starts_with("gid 0: received step 3 text(5 bytes"),
        "{:?}",
        v.messages
    );
}

/// Correct calls but a wrong published result (one flipped hash bit) are
/// reported for that lane only.
#[test]
fn checker_reports_a_wrong_result() {
    let seed = 11;
    let host = ConformHost::new(seed, STEPS, 1);
    let d = Dispatcher::new(ServerConfig::default());
    // Play lane 0 from the model: every call exactly as expected.
    let mut m = Model::new(seed, 0, STEPS);
    let mut scratch = Scratch::default();
    let mut halted = false;
    while let Some((step, want)) = m.next_call(&mut scratch) {
        match want {
            Want::Call(Call::Mix { a, b, c, d, e }) => {
                host.mix(0, step, a, b, c, d, e);
            }
            Want::Call(Call::Record(r)) => {
                host.record(0, step, r);
            }
            Want::Call(Call::Text { len, seed }) => {
                let mut buf = [0u8; 400];
                host.text(0, step, gpu_example_services::conform::gen_text(seed, len, &mut buf));
            }
            Want::Call(Call::Sum { len, seed }) => {
                let mut buf = [0u32; 100];
                host.sum(0, step, gpu_example_services::conform::gen_words(seed, len, &mut buf));
            }
            Want::Call(Call::Fill { key, len }) => {
                host.fill(0, step, key, &mut vec![0; len as usize]);
            }
            Want::Call(Call::Ack { x }) => {
                host.ack(0, step, x);
            }
            Want::Call(Call::Note { v, len, seed }) => {
                let mut buf = [0u8; 400];
                host.note(0, step, v, gpu_example_services::conform::gen_text(seed, len, &mut buf));
            }
            Want::Finish => {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| host.finish(0, step)));
                assert!(r.unwrap_err().is::<gpu_rpc::lanes::Halt>(), "finish halts the lane");
                halted = true;
            }
        }
    }
    let mut words = m.result().expect("drained").to_words();
    let v = host.verify(&words, &d);
    assert!(v.ok(), "{:?}", v.problem());
    assert_eq!(v.halted(), halted as u64);
    // The same host again (its models are drained; verifying twice is fine),
    // now with one bit of the published hash flipped.
    words[4] ^= 1;
    let v = host.verify(&words, &d);
    assert!(!v.ok());
    assert_eq!(v.bad_lanes, 1);
    assert!(v.messages[0].starts_with("gid 0: published [calls"), "{:?}", v.messages);
}
