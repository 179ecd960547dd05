use gpu_rpc::Wire;

#[derive(Wire)]
#[repr(C)]
pub enum Level {
    Low,
    High,
}

fn main() {}
