//! The host's stdout and stderr sinks, and how the lanes of one call write
//! to them: their lines are gathered on the server thread and handed to
//! the sink together, under one lock and in one `write_all`, when the
//! call's last lane has run (before the reply; `server::is_last_lane`).
//! One lock per line let the server threads queue on it (more threads
//! printed slower than one), and a line-buffered stdout made a `write`
//! system call of every line.
//!
//! A sink's error goes to the lane whose write handed the lines on (the
//! call's last); lines handed on at the call's end (when lanes after the
//! last writer failed before writing: `server::at_call_end`) keep their
//! error for the sink's next write or flush.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::server::{at_call_end, is_last_lane};

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
    /// The error of lines handed on at a call's end, for the next write or
    /// flush to return.
    error: Option<IoError>,
}

/// Lines this thread gathered in the call it serves, per sink.
struct Gathered {
    sinks: Vec<(Arc<Sink>, Vec<u8>)>,
    /// An emptied buffer kept for the next call.
    spare: Vec<u8>,
}

std::thread_local! {
    static GATHERED: RefCell<Gathered> = const { RefCell::new(Gathered { sinks: Vec::new(), spare: Vec::new() }) };
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panicking writer must not take the other lanes' output down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        let last = is_last_lane();
        let gathered = GATHERED.with(|g| {
            let mut g = g.borrow_mut();
            if (last && g.sinks.is_empty()) || bytes.len() > GATHER_MAX {
                return false;
            }
            if g.sinks.is_empty() {
                // Not the call's last lane, so the thread is serving a call
                // and the work is taken; should it come back, the lines are
                // handed on at once instead.
                if at_call_end(hand_on_gathered).is_err() {
                    return false;
                }
            }
            let at = match g.sinks.iter().position(|(s, _)| Arc::ptr_eq(s, self)) {
                Some(at) => at,
                None => {
                    let buf = std::mem::take(&mut g.spare);
                    g.sinks.push((Arc::clone(self), buf));
                    g.sinks.len() - 1
                }
            };
            g.sinks[at].1.extend_from_slice(bytes);
            true
        });
        if !gathered {
            // The lines gathered before these go first.
            let mine = hand_on(self);
            return self.write_now(bytes).and(mine);
        }
        if last {
            hand_on(self)
        } else {
            Ok(())
        }
    }

    /// Flush the writer (and return an error kept from lines handed on at a
    /// call's end).
    pub(super) fn flush(&self) -> Result<(), IoError> {
        let mut s = lock(&self.state);
        let kept = s.error.take();
        let r = s.writer.flush().map_err(IoError::from);
        kept.map_or(r, Err)
    }

    /// The host's own writes (panic reports), under the sink's lock.
    pub(super) fn with_writer<R>(&self, f: impl FnOnce(&mut dyn Write) -> R) -> R {
        f(&mut *lock(&self.state).writer)
    }

    /// Write `bytes` now, under the lock.
    fn write_now(&self, bytes: &[u8]) -> Result<(), IoError> {
        let mut s = lock(&self.state);
        let kept = s.error.take();
        let r = s.writer.write_all(bytes).map_err(IoError::from);
        kept.map_or(r, Err)
    }
}

/// Hand on every sink's gathered lines; return `mine`'s result (the others'
/// errors are kept for their next write or flush).
fn hand_on(mine: &Arc<Sink>) -> Result<(), IoError> {
    let sinks = GATHERED.with(|g| std::mem::take(&mut g.borrow_mut().sinks));
    let mut result = Ok(());
    for (sink, mut buf) in sinks {
        if !buf.is_empty() {
            let r = sink.write_now(&buf);
            if Arc::ptr_eq(&sink, mine) {
                result = r;
            } else if let Err(e) = r {
                lock(&sink.state).error.get_or_insert(e);
            }
        }
        buf.clear();
        if buf.capacity() <= KEEP_BYTES {
            GATHERED.with(|g| g.borrow_mut().spare = buf);
        }
    }
    result
}

/// The call's end: hand on what its lanes left gathered (when lanes after
/// the last writer failed before writing), keeping errors for later.
fn hand_on_gathered() {
    let sinks = GATHERED.with(|g| std::mem::take(&mut g.borrow_mut().sinks));
    for (sink, buf) in sinks {
        if let Err(e) = sink.write_now(&buf) {
            lock(&sink.state).error.get_or_insert(e);
        }
    }
}
