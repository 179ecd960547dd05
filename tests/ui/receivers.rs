use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn by_value(self, x: u32);
    fn by_mut(&mut self, x: u32);
    fn no_receiver(x: u32) -> u32;
    fn typed(self: &Self);
}

fn main() {}
