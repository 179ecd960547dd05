//! Agents and memory pools: finding the GPU agents and the pools the
//! backend allocates from.

use std::ffi::c_void;

use super::ffi::{Agent, Api, MemoryPool, Status};
use super::*;

extern "C" fn push_agent(agent: Agent, data: *mut c_void) -> Status {
    // SAFETY: `data` is the `&mut Vec<Agent>` passed by `all_agents`, alive
    // for the whole (synchronous) iteration.
    unsafe { (*data.cast::<Vec<Agent>>()).push(agent) };
    ffi::STATUS_SUCCESS
}

extern "C" fn push_pool(pool: MemoryPool, data: *mut c_void) -> Status {
    // SAFETY: as in `push_agent`, with `&mut Vec<MemoryPool>`.
    unsafe { (*data.cast::<Vec<MemoryPool>>()).push(pool) };
    ffi::STATUS_SUCCESS
}

pub(super) fn all_agents(api: &Api) -> Result<Vec<Agent>, HsaError> {
    let mut agents: Vec<Agent> = Vec::new();
    // SAFETY: the callback only pushes into `agents`, which outlives the call.
    let r = unsafe { (api.iterate_agents)(push_agent, (&mut agents as *mut Vec<Agent>).cast()) };
    check(api, "listing HSA agents", r)?;
    Ok(agents)
}

/// `hsa_agent_get_info` for a plain value.
pub(super) fn agent_info<T: Copy + Default>(api: &Api, agent: Agent, attr: u32, what: &str) -> Result<T, HsaError> {
    let mut v = T::default();
    // SAFETY: `attr` is an attribute whose value type is `T` (each caller
    // passes the type hsa.h documents for it); `v` is a valid place for it.
    let r = unsafe { (api.agent_get_info)(agent, attr, (&mut v as *mut T).cast()) };
    check(api, what, r)?;
    Ok(v)
}

pub(super) fn agent_name(api: &Api, agent: Agent) -> Result<String, HsaError> {
    let mut name = [0u8; 64];
    // SAFETY: HSA_AGENT_INFO_NAME writes a NUL-terminated `char[64]`.
    let r = unsafe { (api.agent_get_info)(agent, ffi::AGENT_INFO_NAME, name.as_mut_ptr().cast()) };
    check(api, "querying an agent's name", r)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// What the backend needs to know about a memory pool to choose one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PoolInfo {
    pub(super) pool: MemoryPool,
    /// `hsa_amd_segment_t`.
    pub(super) segment: u32,
    /// `hsa_amd_memory_pool_global_flag_t` bits.
    pub(super) flags: u32,
    /// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED`.
    pub(super) alloc_allowed: bool,
    /// `hsa_amd_memory_pool_access_t` of the GPU agent to this pool.
    pub(super) gpu_access: u32,
}

impl PoolInfo {
    fn usable(&self) -> bool {
        self.segment == ffi::SEGMENT_GLOBAL && self.alloc_allowed && self.gpu_access != ffi::ACCESS_NEVER_ALLOWED
    }
}

/// The pool for the shared region: a fine-grained (never coarse-grained)
/// global pool the GPU may access; one without the kernarg flag when there
/// is a choice (the kernarg pool is usually small).
pub(super) fn select_shared_pool(pools: &[PoolInfo]) -> Option<PoolInfo> {
    let fine =
        |p: &&PoolInfo| p.usable() && p.flags & ffi::FLAG_FINE_GRAINED != 0 && p.flags & ffi::FLAG_COARSE_GRAINED == 0;
    pools
        .iter()
        .filter(fine)
        .find(|p| p.flags & ffi::FLAG_KERNARG_INIT == 0)
        .or_else(|| pools.iter().find(fine))
        .copied()
}

/// The pool for kernel arguments: one with the kernarg flag.
pub(super) fn select_kernarg_pool(pools: &[PoolInfo]) -> Option<PoolInfo> {
    pools
        .iter()
        .find(|p| p.usable() && p.flags & ffi::FLAG_KERNARG_INIT != 0)
        .copied()
}

/// The pool for the device-local lock words: the GPU's own global pool,
/// coarse-grained preferred (only the GPU touches the words while a kernel
/// runs).
pub(super) fn select_device_pool(pools: &[PoolInfo]) -> Option<PoolInfo> {
    pools
        .iter()
        .filter(|p| p.usable())
        .find(|p| p.flags & ffi::FLAG_COARSE_GRAINED != 0)
        .or_else(|| pools.iter().find(|p| p.usable()))
        .copied()
}

pub(super) fn pool_infos(api: &Api, owner: Agent, gpu: Agent) -> Result<Vec<PoolInfo>, HsaError> {
    let mut pools: Vec<MemoryPool> = Vec::new();
    // SAFETY: the callback only pushes into `pools`, which outlives the call.
    let r = unsafe { (api.iterate_pools)(owner, push_pool, (&mut pools as *mut Vec<MemoryPool>).cast()) };
    check(api, "listing memory pools", r)?;
    let mut infos = Vec::with_capacity(pools.len());
    for pool in pools {
        let (mut segment, mut flags, mut alloc, mut access) = (u32::MAX, 0u32, false, ffi::ACCESS_NEVER_ALLOWED);
        // SAFETY: each attribute's value type is the one hsa_ext_amd.h gives
        // it (segment: u32 enum, flags: u32, alloc allowed: bool, access: u32
        // enum); each pointer is a valid place for it.
        unsafe {
            check(
                api,
                "querying a pool's segment",
                (api.pool_get_info)(pool, ffi::POOL_INFO_SEGMENT, (&mut segment as *mut u32).cast()),
            )?;
            if segment == ffi::SEGMENT_GLOBAL {
                check(
                    api,
                    "querying a pool's flags",
                    (api.pool_get_info)(pool, ffi::POOL_INFO_GLOBAL_FLAGS, (&mut flags as *mut u32).cast()),
                )?;
            }
            check(
                api,
                "querying whether a pool allows allocation",
                (api.pool_get_info)(
                    pool,
                    ffi::POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                    (&mut alloc as *mut bool).cast(),
                ),
            )?;
            check(
                api,
                "querying the GPU's access to a pool",
                (api.agent_pool_get_info)(gpu, pool, ffi::AGENT_POOL_INFO_ACCESS, (&mut access as *mut u32).cast()),
            )?;
        }
        infos.push(PoolInfo {
            pool,
            segment,
            flags,
            alloc_allowed: alloc,
            gpu_access: access,
        });
    }
    Ok(infos)
}
