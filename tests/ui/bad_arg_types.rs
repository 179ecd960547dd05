use gpu_rpc::gpu_rpc;

#[gpu_rpc]
pub trait Svc {
    fn string(&self, s: String);
    fn vec(&self, v: Vec<u32>);
    fn boxed(&self, b: Box<u64>);
    fn raw(&self, p: *const u8);
    fn raw_mut(&self, p: *mut u8);
    fn shared_ref(&self, x: &u32);
    fn mut_ref(&self, x: &mut u32);
    fn nested(&self, x: Option<&u32>);
    fn nested_vec(&self, x: (u8, Vec<u8>));
    fn dyn_ref(&self, x: &dyn Fn());
}

fn main() {}
