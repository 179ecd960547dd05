use gpu_rpc::gpu_rpc;

#[repr(C)]
pub struct NotWire {
    pub x: u32,
}

#[gpu_rpc]
pub trait Svc {
    fn put(&self, a: u32, v: NotWire);
}

fn main() {}
