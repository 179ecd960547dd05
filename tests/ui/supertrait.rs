use gpu_rpc::gpu_rpc;

pub trait Base {
    fn base(&self);
}

// `Send`, `Sync` and `'static` are fine; other supertraits are not.
#[gpu_rpc]
pub trait Svc: Send + Sync + 'static + Base {
    fn get(&self) -> u32;
}

fn main() {}
