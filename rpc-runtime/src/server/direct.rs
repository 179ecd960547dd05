//! The server's copies for [the direct path](crate::call#the-direct-path):
//! a call's direct inputs fetched from the device before it runs, its direct
//! out-buffers stored on the device before the reply. The frame's packets
//! around them are `serve_call.rs`'s; the copies themselves the backend's
//! [`DeviceMemory`].

use super::serve_call::{direct_of, lens_of};
use super::*;

/// Device addresses of a call's direct streams and out-buffers, per lane.
pub(super) type Addresses = [[u64; MAX_IN_STREAMS + MAX_OUT_STREAMS]; MAX_LANES as usize];

/// Refuse one lane: `(lane, status, argument index, message)`.
pub(super) type Refuse<'r> = dyn FnMut(u32, Status, u32, String) + 'r;

impl Dispatcher {
    /// Fetch the direct inputs of the lanes `ok` (those still `Ok`) into
    /// `streams`, with one [`DeviceMemory::read`] for the whole call.
    /// The lengths were checked against the limits already; a lane whose
    /// buffer cannot be allocated, or whose copy fails, or that this server
    /// cannot copy for (no `memory`), is refused naming the argument.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_in(
        &self,
        ok: u64,
        n_in: usize,
        blocks: &[Vec<u8>],
        addrs: &Addresses,
        memory: Option<&dyn DeviceMemory>,
        streams: &mut [Vec<Vec<u8>>],
        refuse: &mut Refuse<'_>,
    ) {
        let mut wanted: Vec<(u32, usize)> = Vec::new();
        for lane in iter_lanes(ok) {
            for i in (0..n_in).filter(|&i| direct_of(&blocks[lane as usize], i)) {
                wanted.push((lane, i));
            }
        }
        if wanted.is_empty() {
            return;
        }
        let Some(memory) = memory else {
            for (lane, i) in wanted {
                let at = addrs[lane as usize][i];
                let message = format!(
                    "streamed argument {i} asks for a direct copy from {at:#x}, but this server has no device \
                     memory to copy with (Server::with_memory)"
                );
                refuse(lane, Status::InvalidArgument, i as u32, message);
            }
            return;
        };
        // Size each buffer; `len <= max_stream_bytes`, checked before.
        let mut copyable = Vec::with_capacity(wanted.len());
        for (lane, i) in wanted {
            let len = lens_of(&blocks[lane as usize], i) as usize;
            let s = &mut streams[lane as usize][i];
            s.clear();
            if s.try_reserve_exact(len).is_err() {
                let message = format!("streamed argument {i} of {len} bytes: the host could not allocate it");
                refuse(lane, Status::TooLarge, i as u32, message);
                continue;
            }
            s.resize(len, 0);
            copyable.push((lane, i));
        }
        // One read for the whole call: the backend may merge neighbours.
        // `copyable` is in lane order, then stream order.
        let mut failed = Vec::new();
        let mut who = Vec::with_capacity(copyable.len());
        {
            let mut copies: Vec<(u64, &mut [u8])> = Vec::with_capacity(copyable.len());
            let mut want = copyable.iter().peekable();
            for (lane, lane_streams) in streams.iter_mut().enumerate() {
                for (i, s) in lane_streams.iter_mut().enumerate() {
                    if let Some(&(l, i)) = want.next_if(|&&(l, k)| l as usize == lane && k == i) {
                        copies.push((addrs[lane][i], s.as_mut_slice()));
                        who.push((l, i));
                    }
                }
            }
            memory.read(&mut copies, &mut |k, e| failed.push((k, e)));
        }
        for (k, e) in failed {
            if let Some(&(lane, i)) = who.get(k) {
                let at = addrs[lane as usize][i];
                let len = lens_of(&blocks[lane as usize], i);
                let message = format!("streamed argument {i}: the direct copy of {len} bytes from {at:#x} failed: {e}");
                refuse(lane, Status::InvalidArgument, i as u32, message);
            }
        }
    }

    /// Store the direct out-buffers of `call`'s lanes still `Ok` on the
    /// device, with one [`DeviceMemory::write`]; a lane whose copy fails, or
    /// that this server cannot copy for, fails naming the out-buffer.
    pub(super) fn copy_out(
        &self,
        call: &mut ServerCall<'_>,
        desc: &CallDesc,
        addrs: &Addresses,
        memory: Option<&dyn DeviceMemory>,
    ) {
        let n_in = call.n_in;
        let mut wanted: Vec<(u32, usize)> = Vec::new();
        for lane in iter_lanes(call.ok_mask()) {
            for j in (0..desc.out_elem_sizes.len()).filter(|&j| call.out_direct(lane, j)) {
                wanted.push((lane, j));
            }
        }
        if wanted.is_empty() {
            return;
        }
        let mut failed: Vec<(usize, String)> = Vec::new();
        match memory {
            None => {
                for (k, &(lane, j)) in wanted.iter().enumerate() {
                    let at = addrs[lane as usize][n_in + j];
                    failed.push((
                        k,
                        format!(
                            "out-buffer {j} asks for a direct copy to {at:#x}, but this server has no device memory \
                             to copy with (Server::with_memory)"
                        ),
                    ));
                }
            }
            Some(memory) => {
                let copies: Vec<(u64, &[u8])> = wanted
                    .iter()
                    .map(|&(lane, j)| {
                        let l = lane as usize;
                        let bytes = lens_of(&call.blocks[l], n_in + j) as usize * desc.out_elem_sizes[j] as usize;
                        let data = call.outs[l].get(j).map(Vec::as_slice).unwrap_or_default();
                        (addrs[l][n_in + j], &data[..bytes.min(data.len())])
                    })
                    .collect();
                memory.write(&copies, &mut |k, e| {
                    let (at, data) = (copies[k].0, copies[k].1.len());
                    let j = wanted[k].1;
                    failed.push((
                        k,
                        format!("out-buffer {j}: the direct copy of {data} bytes to {at:#x} failed: {e}"),
                    ));
                });
            }
        }
        for (k, message) in failed {
            let (lane, j) = wanted[k];
            call.fail(
                lane,
                LaneError {
                    status: Status::InvalidArgument,
                    detail: (n_in + j) as u32,
                    message,
                },
            );
        }
    }
}
