use gpu_rpc::Wire;

#[derive(Wire)]
pub struct Sample {
    pub id: u32,
    pub value: f32,
}

fn main() {}
