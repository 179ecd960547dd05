//! Host side of the randomized conformance suite (issue 12): [`ConformHost`]
//! serves the [`Conform`] service, checking every call online against a
//! [`Model`] of the calling lane's program, and [`ConformHost::verify`]
//! checks, after the launch, that every lane made all its calls and published
//! exactly the results its model predicts, and that the server logged no
//! error. Used by the `gpu_conform` binary (CUDA) and the `conform_cpu` test
//! (CPU backend).
//!
//! Memory is bounded: per lane, one model cursor and a few counters (about
//! 100 bytes), however many calls the lane makes; at most
//! [`MAX_MESSAGES`] problem descriptions are kept.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use gpu_example_services::conform::{
    ack_value, fill_value, fill_word, gen_text, gen_words, mix_value, note_digest, record_value, sum_value, text_value,
    Call, End, LaneResult, Method, Model, Rec, Scratch, Want, METHODS, NO_BAD, RESULT_WORDS,
};
use gpu_example_services::Conform;
use gpu_rpc::server::Dispatcher;

/// Most problem descriptions a [`ConformHost`] keeps (the rest are counted).
pub const MAX_MESSAGES: usize = 8;

/// A set of fire-and-forget notes, compared order-insensitively (the server
/// may run a lane's notes in any order relative to its other calls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NoteSet {
    count: u32,
    sum: u64,
    xor: u64,
}

impl NoteSet {
    fn add(&mut self, digest: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(digest);
        self.xor ^= digest;
    }
}

/// What the host knows about one lane while it is served.
struct LaneLog {
    model: Model,
    notes_got: NoteSet,
    notes_want: NoteSet,
    /// Calls received from this lane (fire-and-forget ones included).
    received: u32,
    /// The step of the last call received, if any.
    last_step: Option<u32>,
    /// A problem was already reported for this lane (only the first one is:
    /// after it, the lane's log and the model no longer line up).
    bad: bool,
}

/// What a lane sent, as the host received it.
#[derive(Clone, Copy, Debug)]
enum Got<'a> {
    Mix { a: u64, b: i32, c: u8, d: bool, e: f64 },
    Record(Rec),
    Text(&'a str),
    Ack(u32),
    Sum(&'a [u32]),
    Fill { key: u64, len: usize },
    Finish,
}

impl Got<'_> {
    fn method(&self) -> Method {
        match self {
            Got::Mix { .. } => Method::Mix,
            Got::Record(_) => Method::Record,
            Got::Text(_) => Method::Text,
            Got::Ack(_) => Method::Ack,
            Got::Sum(_) => Method::Sum,
            Got::Fill { .. } => Method::Fill,
            Got::Finish => Method::Finish,
        }
    }

    /// Whether this is exactly the call the model expects.
    fn matches(&self, want: &Want, scratch: &mut Scratch) -> bool {
        match (*self, *want) {
            (
                Got::Mix { a, b, c, d, e },
                Want::Call(Call::Mix {
                    a: wa,
                    b: wb,
                    c: wc,
                    d: wd,
                    e: we,
                }),
            ) => (a, b, c, d, e.to_bits()) == (wa, wb, wc, wd, we.to_bits()),
            (Got::Record(r), Want::Call(Call::Record(w))) => r == w,
            (Got::Ack(x), Want::Call(Call::Ack { x: wx })) => x == wx,
            (Got::Text(s), Want::Call(Call::Text { len, seed })) => s == gen_text(seed, len, scratch.bytes()),
            (Got::Sum(v), Want::Call(Call::Sum { len, seed })) => v == gen_words(seed, len, scratch.words()),
            (Got::Fill { key, len }, Want::Call(Call::Fill { key: wk, len: wl })) => key == wk && len == wl as usize,
            (Got::Finish, Want::Finish) => true,
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Got::Mix { a, b, c, d, e } => format!("mix(a={a:#x}, b={b}, c={c}, d={d}, e={e:e})"),
            Got::Record(r) => format!("record(id={:#x}, ..)", r.id),
            Got::Ack(x) => format!("ack(x={x:#x})"),
            Got::Text(s) => format!("text({} bytes, fnv {:#x})", s.len(), fnv(s.as_bytes())),
            Got::Sum(v) => format!("sum({} words, first {:?})", v.len(), v.first()),
            Got::Fill { key, len } => format!("fill(key={key:#x}, {len} words)"),
            Got::Finish => "finish".to_string(),
        }
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    gpu_example_services::conform::fnv64(bytes)
}

fn describe_want(want: &Want, scratch: &mut Scratch) -> String {
    match *want {
        Want::Call(Call::Mix { a, b, c, d, e }) => format!("mix(a={a:#x}, b={b}, c={c}, d={d}, e={e:e})"),
        Want::Call(Call::Record(r)) => format!("record(id={:#x}, ..)", r.id),
        Want::Call(Call::Text { len, seed }) => {
            format!(
                "text({len} bytes, fnv {:#x})",
                fnv(gen_text(seed, len, scratch.bytes()).as_bytes())
            )
        }
        Want::Call(Call::Sum { len, seed }) => {
            format!(
                "sum({len} words, first {:?})",
                gen_words(seed, len, scratch.words()).first()
            )
        }
        Want::Call(Call::Fill { key, len }) => format!("fill(key={key:#x}, {len} words)"),
        Want::Call(Call::Ack { x }) => format!("ack(x={x:#x})"),
        Want::Call(Call::Note { v, len, .. }) => format!("note(v={v:#x}, {len}-byte tag)"),
        Want::Finish => "finish".to_string(),
    }
}

/// A decoded results entry, for messages.
fn describe_result(words: &[u64]) -> String {
    let first_bad = match words[3] {
        NO_BAD => "none".to_string(),
        w => format!("step {} {}", w >> 32, {
            let low = w as u32;
            if low == gpu_example_services::conform::MISMATCH {
                "wrong value".to_string()
            } else {
                format!("status {:?}", gpu_rpc::Status::from_u32(low))
            }
        }),
    };
    let end = match words[5] {
        1 => "completed".to_string(),
        2 => "returned".to_string(),
        3 => "finished".to_string(),
        w => format!("end word {w:#x} (never published?)"),
    };
    format!(
        "calls {}, wrong values {}, errors {}, first bad {first_bad}, hash {:#x}, {end}",
        words[0], words[1], words[2], words[4]
    )
}

/// The outcome of one checked launch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Lanes in the launch.
    pub lanes: usize,
    /// Lane-calls the lanes' programs make (from the model; `finish` and
    /// fire-and-forget calls included).
    pub lane_calls: u64,
    /// Lane-calls the host served.
    pub served: u64,
    /// Lanes whose calls or results differ from the model.
    pub bad_lanes: u64,
    /// Errors in the server log (`Dispatcher::error_count`).
    pub server_errors: u64,
    /// The first problems, described (at most [`MAX_MESSAGES`]).
    pub messages: Vec<String>,
    /// Lane-calls served per method, indexed by [`Method`] number.
    pub per_method: [u64; METHODS],
    /// Lanes per way their program ended: completed, returned, finished.
    pub ends: [u64; 3],
}

impl Verdict {
    /// Whether everything matched: every lane's calls and results, no server
    /// error, every call served once.
    pub fn ok(&self) -> bool {
        self.bad_lanes == 0 && self.server_errors == 0 && self.served == self.lane_calls
    }

    /// Lanes that ended by the `-> !` call (`finish`), which halts them.
    pub fn halted(&self) -> u64 {
        self.ends[2]
    }

    /// One line saying what went wrong first, or `None` if nothing did.
    pub fn problem(&self) -> Option<String> {
        if self.ok() {
            return None;
        }
        let first = self.messages.first().cloned().unwrap_or_default();
        Some(format!(
            "{} of {} lanes wrong, {} server errors, {} of {} lane-calls served; first: {first}",
            self.bad_lanes, self.lanes, self.server_errors, self.served, self.lane_calls
        ))
    }
}

/// The host implementation of [`Conform`] for one launch of `lanes` lanes
/// running the programs of `seed` with `steps` top-level ops each. Returns the
/// defined values for whatever it receives, and checks each call against the
/// calling lane's model as it arrives.
pub struct ConformHost {
    lanes: Vec<Mutex<LaneLog>>,
    problems: AtomicU64,
    messages: Mutex<Vec<String>>,
    per_method: [AtomicU64; METHODS],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ConformHost {
    /// A host for `lanes` lanes (global thread ids `0..lanes`) running the
    /// programs of `seed`, `steps` top-level ops each.
    pub fn new(seed: u64, steps: u32, lanes: usize) -> ConformHost {
        ConformHost {
            lanes: (0..lanes)
                .map(|gid| {
                    Mutex::new(LaneLog {
                        model: Model::new(seed, gid as u32, steps),
                        notes_got: NoteSet::default(),
                        notes_want: NoteSet::default(),
                        received: 0,
                        last_step: None,
                        bad: false,
                    })
                })
                .collect(),
            problems: AtomicU64::new(0),
            messages: Mutex::new(Vec::new()),
            per_method: Default::default(),
        }
    }

    /// The problems found so far while serving (at most [`MAX_MESSAGES`]),
    /// e.g. to say what the host saw before a kernel trapped or hung.
    pub fn problems(&self) -> Vec<String> {
        lock(&self.messages).clone()
    }

    fn problem(&self, message: String) {
        // Relaxed: a count read after the launch (the launch joins the server
        // threads first).
        self.problems.fetch_add(1, Ordering::Relaxed);
        let mut m = lock(&self.messages);
        if m.len() < MAX_MESSAGES {
            m.push(message);
        }
    }

    fn count(&self, method: Method) {
        // Relaxed: a statistic read after the launch.
        self.per_method[method as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn lane(&self, gid: u32, what: &str) -> Option<MutexGuard<'_, LaneLog>> {
        match self.lanes.get(gid as usize) {
            Some(l) => Some(lock(l)),
            None => {
                self.problem(format!(
                    "{what} from gid {gid}, outside the launch's {} lanes",
                    self.lanes.len()
                ));
                None
            }
        }
    }

    /// Check a call that waits for its reply (or `finish`) against the model.
    fn sync(&self, gid: u32, step: u32, got: Got<'_>) {
        self.count(got.method());
        let Some(mut log) = self.lane(gid, &got.describe()) else {
            return;
        };
        log.received += 1;
        log.last_step = Some(step);
        if log.bad {
            return;
        }
        let mut scratch = Scratch::default();
        loop {
            match log.model.next_call(&mut scratch) {
                Some((s, Want::Call(Call::Note { v, len, seed }))) => {
                    let d = note_digest(s, v, gen_text(seed, len, scratch.bytes()));
                    log.notes_want.add(d);
                }
                Some((s, want)) => {
                    if s != step || !got.matches(&want, &mut scratch) {
                        log.bad = true;
                        drop(log);
                        self.problem(format!(
                            "gid {gid}: received step {step} {}, expected step {s} {}",
                            got.describe(),
                            describe_want(&want, &mut scratch)
                        ));
                    }
                    return;
                }
                None => {
                    log.bad = true;
                    drop(log);
                    self.problem(format!(
                        "gid {gid}: received step {step} {} after the program ended",
                        got.describe()
                    ));
                    return;
                }
            }
        }
    }

    /// While a launch hangs: the lanes that have not published their results
    /// yet (`results` as the kernel left it so far; a lane publishes just
    /// before it ends), as a count and a description of the first few: how
    /// many calls the host received from each, the last step, and the call
    /// the model expects next.
    pub fn unfinished(&self, results: &[u64], max: usize) -> (usize, String) {
        let mut n = 0;
        let mut text = Vec::new();
        let mut scratch = Scratch::default();
        for (gid, lane) in self.lanes.iter().enumerate() {
            let end = results.get(gid * RESULT_WORDS + 5).copied().unwrap_or(0);
            if (1..=3).contains(&end) {
                continue;
            }
            n += 1;
            if text.len() < max {
                let log = lock(lane);
                let mut model = log.model.clone();
                // The very next call, fire-and-forget notes included (a lane
                // stuck in a note shows here, not in `next`).
                let first = match log.model.clone().next_call(&mut scratch) {
                    Some((s, w)) => format!("step {s} {}", describe_want(&w, &mut scratch)),
                    None => "nothing".to_string(),
                };
                let next = loop {
                    match model.next_call(&mut scratch) {
                        Some((_, Want::Call(Call::Note { .. }))) => continue,
                        Some((s, w)) => break format!("step {s} {}", describe_want(&w, &mut scratch)),
                        None => break "nothing (its program is over)".to_string(),
                    }
                };
                let last = log.last_step.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
                text.push(format!(
                    "gid {gid} (received {} calls, last step {last}; next expected {next}; next call {first})",
                    log.received
                ));
            }
        }
        (n, text.join(", "))
    }

    /// After the launch: drain every lane's model, compare its notes and its
    /// published `results` (`RESULT_WORDS` per lane; a lane that published
    /// nothing leaves whatever the buffer held), and read the server log.
    pub fn verify(&self, results: &[u64], dispatcher: &Dispatcher) -> Verdict {
        let mut v = Verdict {
            lanes: self.lanes.len(),
            ..Verdict::default()
        };
        let mut scratch = Scratch::default();
        let mut bad_lanes = 0;
        for (gid, lane) in self.lanes.iter().enumerate() {
            let mut log = lock(lane);
            let mut lane_bad = log.bad;
            while let Some((s, want)) = log.model.next_call(&mut scratch) {
                match want {
                    Want::Call(Call::Note { v, len, seed }) => {
                        let d = note_digest(s, v, gen_text(seed, len, scratch.bytes()));
                        log.notes_want.add(d);
                    }
                    _ if !lane_bad => {
                        lane_bad = true;
                        self.problem(format!(
                            "gid {gid}: never made step {s} {}",
                            describe_want(&want, &mut scratch)
                        ));
                    }
                    _ => {}
                }
            }
            let want: LaneResult = log.model.result().expect("the model is drained");
            if log.notes_got != log.notes_want && !lane_bad {
                lane_bad = true;
                self.problem(format!(
                    "gid {gid}: {} fire-and-forget notes received, {} expected (or their contents differ)",
                    log.notes_got.count, log.notes_want.count
                ));
            }
            let want_words = want.to_words();
            let got_words = results.get(gid * RESULT_WORDS..(gid + 1) * RESULT_WORDS);
            if got_words != Some(&want_words[..]) {
                if !lane_bad {
                    self.problem(match got_words {
                        Some(g) => format!(
                            "gid {gid}: published [{}], expected [{}]",
                            describe_result(g),
                            describe_result(&want_words)
                        ),
                        None => format!("gid {gid}: no results slot"),
                    });
                }
                lane_bad = true;
            }
            v.lane_calls += want.calls as u64;
            v.ends[match want.end {
                End::Completed => 0,
                End::Returned => 1,
                End::Finished => 2,
            }] += 1;
            bad_lanes += lane_bad as u64;
        }
        for (i, c) in self.per_method.iter().enumerate() {
            // Relaxed: the launch has ended and its server threads were joined.
            v.per_method[i] = c.load(Ordering::Relaxed);
        }
        v.served = v.per_method.iter().sum();
        // Relaxed: as above.
        let problems = self.problems.load(Ordering::Relaxed);
        // Problems not tied to a lane (a gid out of range) count as a bad lane.
        v.bad_lanes = bad_lanes.max(problems.min(1));
        v.server_errors = dispatcher.error_count();
        v.messages = lock(&self.messages).clone();
        for e in dispatcher
            .errors()
            .into_iter()
            .take(MAX_MESSAGES.saturating_sub(v.messages.len()))
        {
            v.messages.push(format!("server log: {e}"));
        }
        v
    }
}

impl Conform for ConformHost {
    fn mix(&self, gid: u32, step: u32, a: u64, b: i32, c: u8, d: bool, e: f64) -> (u64, f64) {
        self.sync(gid, step, Got::Mix { a, b, c, d, e });
        mix_value(gid, step, a, b, c, d, e)
    }

    fn record(&self, gid: u32, step: u32, r: Rec) -> Rec {
        self.sync(gid, step, Got::Record(r));
        record_value(gid, step, r)
    }

    fn text(&self, gid: u32, step: u32, s: &str) -> u64 {
        self.sync(gid, step, Got::Text(s));
        text_value(gid, step, s)
    }

    fn sum(&self, gid: u32, step: u32, v: &[u32]) -> u64 {
        self.sync(gid, step, Got::Sum(v));
        sum_value(gid, step, v)
    }

    fn ack(&self, gid: u32, step: u32, x: u32) -> u32 {
        self.sync(gid, step, Got::Ack(x));
        ack_value(x)
    }

    fn fill(&self, gid: u32, step: u32, key: u64, out: &mut [u64]) -> u32 {
        self.sync(gid, step, Got::Fill { key, len: out.len() });
        for (i, w) in out.iter_mut().enumerate() {
            *w = fill_word(gid, step, key, i);
        }
        fill_value(gid, step, key, out.len())
    }

    fn note(&self, gid: u32, step: u32, v: u64, tag: &str) {
        self.count(Method::Note);
        if let Some(mut log) = self.lane(gid, "note") {
            log.received += 1;
            log.last_step = Some(step);
            log.notes_got.add(note_digest(step, v, tag));
        }
    }

    fn finish(&self, gid: u32, step: u32) -> ! {
        // The lane lock is released inside `sync`, before the halt unwinds.
        self.sync(gid, step, Got::Finish);
        // Ends this lane's call as completed: the generated server treats the
        // `Halt` unwind as "this lane is done" and the device halts the lane
        // after the reply. Never exits the process.
        gpu_rpc::lanes::halt()
    }
}
