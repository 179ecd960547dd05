//! The host's stdout and stderr sinks, and how the lanes of one call write
//! to them: a server thread gathers a call's lines and hands them to the
//! sink together, under one lock and in one `write_all`, when the call's
//! last lane has run (`server::is_last_lane`), before the call's reply. One
//! lock per line let the server threads queue on it (more threads printed
//! slower than one), and a line-buffered stdout made a `write` system call
//! of every line.
//!
//! Order: a thread gathers for one sink and one call at a time. A lane that
//! writes to the other stream (or a call served inside a host method)
//! first hands on what was gathered, so lines reach a terminal showing
//! both streams in lane order. A write of more than [`GATHER_MAX`] bytes
//! goes on its own, after the lines gathered before it.
//!
//! An exit of the process (`ExitMode::Process`) flushes the exiting
//! thread's lines; calls in flight on other server threads end with the
//! process, their gathered lines with them, as their replies do.
//!
//! Errors: the sink's error goes to the lane whose write handed the lines
//! on (the call's last writer). Lines handed on for another reason (the
//! other stream's turn, lanes after the last writer that failed before
//! writing: `server::at_call_end`) keep their error for the sink's next
//! write or flush.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::server::{at_call_end, current_call, is_last_lane};

use super::host::lock;
use super::IoError;

/// Bytes of one write that are gathered; a longer one is handed on at once
/// (after the lines gathered before it), not copied.
const GATHER_MAX: usize = 4096;

/// Capacity of the gathering buffer a server thread keeps between calls.
const KEEP_BYTES: usize = 64 << 10;

/// One of the host's output streams.
pub(super) struct Sink {
    state: Mutex<State>,
}

struct State {
    writer: Box<dyn Write + Send>,
    /// The error of lines handed on for another lane than their last
    /// writer, for the next write or flush to return.
    error: Option<IoError>,
}

/// Lines a server thread gathered.
struct Gathered {
    /// The sink, the call ([`current_call`]) and the bytes.
    lines: Option<(Arc<Sink>, u64, Vec<u8>)>,
    /// An emptied buffer kept for the next call.
    spare: Vec<u8>,
}

std::thread_local! {
    static GATHERED: RefCell<Gathered> = const { RefCell::new(Gathered { lines: None, spare: Vec::new() }) };
}

/// Take this thread's gathered lines if `which` says they are the ones.
fn take_gathered(which: impl FnOnce(&Arc<Sink>, u64) -> bool) -> Option<(Arc<Sink>, Vec<u8>)> {
    GATHERED.with(|g| {
        let mut g = g.borrow_mut();
        match &g.lines {
            Some((sink, call, _)) if which(sink, *call) => g.lines.take().map(|(s, _, b)| (s, b)),
            _ => None,
        }
    })
}

/// Write gathered lines to their sink; the buffer is kept for the next.
fn write_gathered(sink: &Sink, mut buf: Vec<u8>) -> Result<(), IoError> {
    let r = sink.write_now(&buf);
    buf.clear();
    if buf.capacity() <= KEEP_BYTES {
        GATHERED.with(|g| g.borrow_mut().spare = buf);
    }
    r
}

/// Hand on gathered lines for another lane than their last writer: their
/// error is kept for the sink's next write or flush.
fn hand_on_kept(sink: &Sink, buf: Vec<u8>) {
    if let Err(e) = write_gathered(sink, buf) {
        lock(&sink.state).error.get_or_insert(e);
    }
}

impl Sink {
    /// A sink writing to `writer`.
    pub(super) fn new(writer: Box<dyn Write + Send>) -> Arc<Self> {
        Arc::new(Sink {
            state: Mutex::new(State { writer, error: None }),
        })
    }

    /// Write `bytes` in one piece, together with the other lines this
    /// thread's call writes to this sink (see the file's header).
    pub(super) fn write(self: &Arc<Self>, bytes: &[u8]) -> Result<(), IoError> {
        let call = current_call();
        // Lines gathered for the other stream or another call go first.
        if let Some((sink, buf)) = take_gathered(|s, c| !Arc::ptr_eq(s, self) || Some(c) != call) {
            hand_on_kept(&sink, buf);
        }
        let Some(call) = call else {
            return self.write_now(bytes);
        };
        let last = is_last_lane();
        let gathering = GATHERED.with(|g| g.borrow().lines.is_some());
        if bytes.len() > GATHER_MAX || (last && !gathering) {
            let earlier = take_gathered(|_, _| true).map_or(Ok(()), |(s, b)| write_gathered(&s, b));
            return self.write_now(bytes).and(earlier);
        }
        if !gathering {
            // The first line of this call: what is gathered is handed on at
            // its end if no later lane does it. (Inside a call the work is
            // taken; should it come back, the line is written now.)
            if at_call_end(move || hand_on_at_end(call)).is_err() {
                return self.write_now(bytes);
            }
        }
        GATHERED.with(|g| {
            let mut g = g.borrow_mut();
            let spare = std::mem::take(&mut g.spare);
            let (_, _, buf) = g.lines.get_or_insert_with(|| (Arc::clone(self), call, spare));
            buf.extend_from_slice(bytes);
        });
        if last {
            if let Some((sink, buf)) = take_gathered(|_, _| true) {
                return write_gathered(&sink, buf);
            }
        }
        Ok(())
    }

    /// Flush the writer, after the lines this thread gathered for it (a
    /// host method flushing in a lane); returns an error kept from lines
    /// handed on earlier, or the flush's.
    pub(super) fn flush(&self) -> Result<(), IoError> {
        // This call's lines answer to this flush; another call's (an outer
        // call around a nested one) keep their error, as `write` does.
        let call = current_call();
        let mut handed = Ok(());
        if let Some((sink, buf, mine)) = GATHERED.with(|g| {
            let mut g = g.borrow_mut();
            match &g.lines {
                Some((s, c, _)) if std::ptr::eq(Arc::as_ptr(s), self) => {
                    let mine = Some(*c) == call;
                    g.lines.take().map(|(s, _, b)| (s, b, mine))
                }
                _ => None,
            }
        }) {
            if mine {
                handed = write_gathered(&sink, buf);
            } else {
                hand_on_kept(&sink, buf);
            }
        }
        let mut s = lock(&self.state);
        let kept = s.error.take();
        let r = s.writer.flush().map_err(IoError::from);
        kept.map_or(handed.and(r), Err)
    }

    /// The host's own writes (panic reports), under the sink's lock.
    pub(super) fn with_writer<R>(&self, f: impl FnOnce(&mut dyn Write) -> R) -> R {
        f(&mut *lock(&self.state).writer)
    }

    /// Write `bytes` now, under the lock (and return an error kept from
    /// lines handed on earlier, if any, instead of this write's result).
    fn write_now(&self, bytes: &[u8]) -> Result<(), IoError> {
        let mut s = lock(&self.state);
        let kept = s.error.take();
        let r = s.writer.write_all(bytes).map_err(IoError::from);
        kept.map_or(r, Err)
    }
}

/// The end of call `call`: hand on what its lanes left gathered (lanes
/// after the last writer failed before writing).
fn hand_on_at_end(call: u64) {
    if let Some((sink, buf)) = take_gathered(|_, c| c == call) {
        hand_on_kept(&sink, buf);
    }
}
