// `#[gpu_rpc(parallel)]` on every kind of method that returns: values, text,
// slices, out-buffers, several of each, nothing at all, fire-and-forget. The
// generated dispatch does not warn (this file denies warnings).
#![deny(warnings)]

use gpu_rpc::{gpu_rpc, Wire};

#[derive(Wire, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Pt {
    pub x: f32,
    pub y: f32,
}

#[gpu_rpc]
pub trait Svc {
    #[gpu_rpc(parallel)]
    fn nothing(&self);
    #[gpu_rpc(parallel)]
    fn value(&self, a: u64, p: Pt) -> Pt;
    #[gpu_rpc(parallel)]
    fn text(&self, s: &str, b: &[u8], v: &[u32]) -> u64;
    #[gpu_rpc(parallel)]
    fn outs(&self, seed: u8, a: &mut [u8], b: &mut [Pt]) -> u32;
    #[gpu_rpc(parallel, async)]
    fn log(&self, s: &str);
}

pub struct Host;
impl Svc for Host {
    fn nothing(&self) {}
    fn value(&self, a: u64, p: Pt) -> Pt {
        Pt { x: p.x + a as f32, y: p.y }
    }
    fn text(&self, s: &str, b: &[u8], v: &[u32]) -> u64 {
        (s.len() + b.len() + v.len()) as u64
    }
    fn outs(&self, seed: u8, a: &mut [u8], b: &mut [Pt]) -> u32 {
        a.fill(seed);
        b.fill(Pt { x: 1.0, y: 2.0 });
        (a.len() + b.len()) as u32
    }
    fn log(&self, _s: &str) {}
}

pub fn host() -> SvcServer<Host> {
    SvcServer(Host)
}

fn main() {}
