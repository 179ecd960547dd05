use gpu_rpc::Wire;

#[derive(Wire)]
#[repr(C)]
pub struct Msg {
    pub id: u32,
    pub text: String,
}

fn main() {}
