// gpu_rpc_client.cuh: the device side of gpu_rpc in CUDA C++. The same port
// protocol (rpc-runtime/src/protocol.rs), lane rules (lanes.rs) and call frame
// (call/mod.rs) as the Rust client stubs, so one host server serves C++ and Rust
// kernels alike. Every step below mirrors a Rust function of the same name;
// the invariant, the lane rules and the frame layout are stated there, once.
//
// This file is not included by hand: `<Trait>Rpc::cuda_header()` returns a
// self-contained header (this file, the trait's types and a `<Trait>Client`).
// It needs no CUDA header (nvrtc, nvcc and clang `-nocudainc` all compile it)
// and sm_70 or newer (independent thread scheduling, `match.any.sync`).
#ifndef GPU_RPC_CLIENT_CUH
#define GPU_RPC_CLIENT_CUH

#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __forceinline__
#define __forceinline__ __inline__ __attribute__((always_inline))
#endif

// What a panicking-form call (`add(..)`, not `try_add(..)`) does when the
// call fails: by default the thread traps, so the launch fails. Define it
// before including the header to do something else (it must not return).
#ifndef GPU_RPC_ON_FAILURE
#define GPU_RPC_ON_FAILURE(method, result) \
  do {                                     \
    (void)(method);                        \
    (void)(result);                        \
    asm volatile("trap;");                 \
  } while (0)
#endif

namespace gpu_rpc {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
static_assert(sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8 && sizeof(void*) == 8,
              "gpu_rpc: a 64-bit NVPTX target");

// protocol.rs: BUFFER_BYTES, BUFFER_WORDS; call/mod.rs: FIRST_PAYLOAD.
constexpr u32 BUFFER_BYTES = 64;
constexpr u32 BUFFER_WORDS = 8;
constexpr u32 FIRST_PAYLOAD = BUFFER_BYTES - 8;
// protocol.rs: the mailbox word's ownership bit and inline reply.
constexpr u32 OWNER_BIT = 1;
constexpr u32 INLINE_BIT = 2;
constexpr u32 INLINE_SHIFT = 2;
// protocol.rs: the client-local nibble of a port.
constexpr u32 LOCK_BIT = 1;
constexpr u32 SHADOW_OUTBOX = 2;
constexpr u32 KNOWN_IDLE = 4;
constexpr u32 CLIENT_PORTS_PER_WORD = 8;

// What the host passes to a kernel (protocol.rs `ClientDesc`): by value, as
// the kernel's parameter.
struct ClientDesc {
  u64 shared;
  u64 locks;
  u32 port_count;
  u32 lane_size;
};
static_assert(sizeof(ClientDesc) == 24 && alignof(ClientDesc) == 8, "ClientDesc is 24 bytes");

// call/mod.rs `Status`.
enum Status : u32 {
  STATUS_OK = 0,
  STATUS_UNKNOWN_OPCODE = 1,
  STATUS_SIGNATURE_MISMATCH = 2,
  STATUS_HANDLER_PANICKED = 3,
  STATUS_INVALID_ARGUMENT = 4,
  STATUS_TOO_LARGE = 5,
  STATUS_BAD_FRAME = 6,
  STATUS_INVALID_LANE_MASK = 7,
};

// This lane's outcome of a call: the status word and its detail (for
// `STATUS_INVALID_ARGUMENT`, the argument's index).
struct CallResult {
  u32 status;
  u32 detail;
  __device__ bool ok() const { return status == STATUS_OK; }
};

// ---- lanes.rs: warp operations (NVPTX, 32 lanes) --------------------------
namespace lanes {
__device__ __forceinline__ u32 lane_id() {
  u32 r;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ u32 first_lane(u32 mask) {
  u32 r;
  asm("{ .reg .b32 t; brev.b32 t, %1; bfind.shiftamt.u32 %0, t; }" : "=r"(r) : "r"(mask));
  return r;
}
__device__ __forceinline__ bool is_first_lane(u32 mask) { return lane_id() == first_lane(mask); }
__device__ __forceinline__ u32 ballot(u32 mask, bool pred) {
  u32 r;
  asm volatile("{ .reg .pred p; setp.ne.u32 p, %1, 0; vote.sync.ballot.b32 %0, p, %2; }"
               : "=r"(r)
               : "r"((u32)pred), "r"(mask));
  return r;
}
__device__ __forceinline__ u32 broadcast(u32 mask, u32 x) {
  u32 r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 31, %3;" : "=r"(r) : "r"(x), "r"(first_lane(mask)), "r"(mask));
  return r;
}
__device__ __forceinline__ void sync(u32 mask) { asm volatile("bar.warp.sync %0;" ::"r"(mask) : "memory"); }
// Lane rule 1: the active lanes whose `key` equals this lane's.
__device__ __forceinline__ u32 group_mask(u64 key) {
  u32 m;
  asm volatile("{ .reg .b32 a; activemask.b32 a; match.any.sync.b64 %0, %1, a; }" : "=r"(m) : "l"(key));
  return m;
}
__device__ __forceinline__ void sleep_briefly() { asm volatile("nanosleep.u32 64;"); }
__device__ __forceinline__ u32 warp_hint() {
  u32 bx, by, bz, gx, gy, tx, ty, tz, nx, ny, nz;
  asm("mov.u32 %0, %%ctaid.x;" : "=r"(bx));
  asm("mov.u32 %0, %%ctaid.y;" : "=r"(by));
  asm("mov.u32 %0, %%ctaid.z;" : "=r"(bz));
  asm("mov.u32 %0, %%nctaid.x;" : "=r"(gx));
  asm("mov.u32 %0, %%nctaid.y;" : "=r"(gy));
  asm("mov.u32 %0, %%tid.x;" : "=r"(tx));
  asm("mov.u32 %0, %%tid.y;" : "=r"(ty));
  asm("mov.u32 %0, %%tid.z;" : "=r"(tz));
  asm("mov.u32 %0, %%ntid.x;" : "=r"(nx));
  asm("mov.u32 %0, %%ntid.y;" : "=r"(ny));
  asm("mov.u32 %0, %%ntid.z;" : "=r"(nz));
  u32 block = bx + gx * (by + gy * bz);
  u32 tid = tx + nx * (ty + ny * tz);
  u32 warps = (nx * ny * nz + 31) / 32;
  return block * warps + tid / 32;
}
[[noreturn]] __device__ __forceinline__ void halt() {
  asm volatile("exit;");
  __builtin_unreachable();
}
}  // namespace lanes

// ---- memory operations (protocol.rs: relaxed accesses and fences) ---------
namespace mem {
__device__ __forceinline__ u32 load_sys(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_sys(u32* p, u32 v) {
  asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ u64 load_sys(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_sys(u64* p, u64 v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// protocol.rs `Process::poll_inbox`: the wait's polls acquire.
__device__ __forceinline__ u32 load_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u32 load_gpu(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// protocol.rs `lock_rmw` and `unlock_rmw`: the client lock's RMWs.
__device__ __forceinline__ u32 fetch_or_acquire(u32* p, u32 v) {
  u32 r;
  asm volatile("atom.acquire.gpu.or.b32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory");
  return r;
}
__device__ __forceinline__ void xor_release(u32* p, u32 v) {
  asm volatile("red.release.gpu.xor.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// System scope: orders accesses to the shared region against the host's.
__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
}  // namespace mem

// ---- protocol.rs: Client, Port ---------------------------------------------
enum PortState : u32 { PORT_FRESH = 0, PORT_SENT = 1, PORT_RECEIVED = 2 };

struct Client;

// An open port, held by the group `mask` of this warp (protocol.rs `Port`;
// the typestate is a field here).
struct Port {
  Client* client;
  u32 index;
  u32 out;
  u32 mask;
  u32 state;
  u32 opened;  // SHADOW_OUTBOX | KNOWN_IDLE when locked (protocol.rs `Port::opened`)
  __device__ void send_words(u32 words, const u64* data);
  __device__ void recv_words(u32 words, u64* data);
  __device__ bool recv_reply_words(u32 words, u64* data);
  __device__ void close();
};

struct Client {
  u32* client_outbox;
  u32* server_outbox;
  u8* headers;
  u64* packets;
  u32* locks;
  u32 port_count;
  u32 lane_size;

  // protocol.rs `Client::from_desc` and `Layout`'s offsets.
  __device__ explicit Client(const ClientDesc& d) {
    u64 mailbox = ((u64)d.port_count * 4 + 63) / 64 * 64;
    u8* base = (u8*)d.shared;
    client_outbox = (u32*)base;
    server_outbox = (u32*)(base + mailbox);
    headers = base + 2 * mailbox;
    packets = (u64*)(base + 2 * mailbox + (u64)d.port_count * 64);
    locks = (u32*)d.locks;
    port_count = d.port_count;
    lane_size = d.lane_size;
  }

  // protocol.rs `Client::id`.
  __device__ u64 id() const { return (u64)client_outbox; }

  __device__ u64* word(u32 index, u32 lane, u32 w) const {
    return packets + (u64)index * lane_size * BUFFER_WORDS + (u64)w * lane_size + lane;
  }

  // protocol.rs `Process::try_lock`: the port's state bits, or false; `test`
  // looks at the lock before the RMW (a sweep's tries, not the first).
  __device__ bool try_lock(u32 mask, u32 index, bool test, u32* state) {
    u32* w = locks + index / CLIENT_PORTS_PER_WORD;
    u32 shift = 4 * (index % CLIENT_PORTS_PER_WORD);
    u32 before = 0;
    if (lanes::is_first_lane(mask)) {
      if (test) before = mem::load_gpu(w);
      if ((before & (LOCK_BIT << shift)) == 0) before = mem::fetch_or_acquire(w, LOCK_BIT << shift);
    }
    u32 s = lanes::broadcast(mask, before) >> shift;
    if (s & LOCK_BIT) return false;
    *state = s;
    return true;
  }

  // protocol.rs `Process::unlock`: clears the lock bit and toggles the state
  // bits `change` in one RMW.
  __device__ void unlock(u32 mask, u32 index, u32 change) {
    lanes::sync(mask);
    if (lanes::is_first_lane(mask)) {
      mem::xor_release(locks + index / CLIENT_PORTS_PER_WORD, (LOCK_BIT | change) << (4 * (index % CLIENT_PORTS_PER_WORD)));
    }
  }

  // protocol.rs `Process::poll_inbox`.
  __device__ u32 poll_inbox(u32 mask, u32 index) {
    return lanes::broadcast(mask, mem::load_acquire_sys(server_outbox + index));
  }

  // protocol.rs `Process::invert_outbox` (lane rule 3).
  __device__ u32 invert_outbox(u32 mask, u32 index, u32 out) {
    u32 flipped = out ^ 1;
    lanes::sync(mask);
    mem::fence_sys();
    if (lanes::is_first_lane(mask)) mem::store_sys(client_outbox + index, flipped);
    return flipped;
  }

  // protocol.rs `Process::wait_for_ownership`: returns the inbox word that
  // showed ownership (it may carry an inline reply).
  __device__ u32 wait(u32 mask, u32 index, u32 out) {
    u32 inbox;
    while (((inbox = poll_inbox(mask, index)) & OWNER_BIT) != out) lanes::sleep_briefly();
    lanes::sync(mask);
    return inbox;
  }

  // protocol.rs `Client::open_keyed`: the group is the active lanes with this
  // key on this client; they scan from one agreed index.
  __device__ Port open(u32 opcode, u64 key, u32 start) {
    u32 n = port_count;
    u32 mask = lanes::group_mask(key) & lanes::group_mask(id());
    u32 first = lanes::broadcast(mask, start) % n;
    u32 index = first;
    u32 sweeps = 0;
    for (;;) {
      u32 state;
      if (try_lock(mask, index, index != first || sweeps != 0, &state)) {
        u32 outbox = (state & SHADOW_OUTBOX) != 0;
        bool idle = (state & KNOWN_IDLE) != 0;
        u32 inbox = idle ? outbox : poll_inbox(mask, index);
        if ((inbox & OWNER_BIT) == outbox) {
          if (lanes::is_first_lane(mask)) {
            u8* h = headers + (u64)index * 64;
            mem::store_sys((u32*)h, opcode);
            mem::store_sys((u64*)(h + 8), (u64)mask);
          }
          lanes::sync(mask);
          Port p = {this, index, outbox, mask, PORT_FRESH, state & (SHADOW_OUTBOX | KNOWN_IDLE)};
          return p;
        }
        unlock(mask, index, 0);
      }
      if (++index == n) index = 0;
      if (index == first) {
        for (u32 k = 0; k < (1u << sweeps); ++k) lanes::sleep_briefly();
        sweeps = sweeps < 4 ? sweeps + 1 : 4;
      }
    }
  }
};

// protocol.rs `Port::send_words`: wait when the server owns the port, write
// this lane's first `words` words, hand the packet over.
__device__ inline void Port::send_words(u32 words, const u64* data) {
  if (state == PORT_SENT) client->wait(mask, index, out);
  u32 lane = lanes::lane_id();
  for (u32 w = 0; w < words; ++w) mem::store_sys(client->word(index, lane, w), data[w]);
  out = client->invert_outbox(mask, index, out);
  state = PORT_SENT;
}

// protocol.rs `Port::recv_words`.
__device__ inline void Port::recv_words(u32 words, u64* data) {
  if (state == PORT_RECEIVED) out = client->invert_outbox(mask, index, out);
  client->wait(mask, index, out);
  u32 lane = lanes::lane_id();
  for (u32 w = 0; w < BUFFER_WORDS; ++w) data[w] = w < words ? mem::load_sys(client->word(index, lane, w)) : 0;
  state = PORT_RECEIVED;
}

// protocol.rs `Port::recv_reply_words`: an inline reply (call/mod.rs
// `inline_reply`) comes out as the packet it stands for: status word 0
// (`Ok`), then the value. Returns whether the reply was inline.
__device__ inline bool Port::recv_reply_words(u32 words, u64* data) {
  if (state == PORT_RECEIVED) out = client->invert_outbox(mask, index, out);
  u32 inbox = client->wait(mask, index, out);
  u32 lane = lanes::lane_id();
  for (u32 w = 0; w < BUFFER_WORDS; ++w) {
    if (inbox & INLINE_BIT)
      data[w] = w == 1 ? (u64)(inbox >> INLINE_SHIFT) : 0;
    else
      data[w] = w < words ? mem::load_sys(client->word(index, lane, w)) : 0;
  }
  state = PORT_RECEIVED;
  return (inbox & INLINE_BIT) != 0;
}

// protocol.rs `Port::close` (client side).
__device__ inline void Port::close() {
  u32 idle = state == PORT_RECEIVED ? KNOWN_IDLE : state == PORT_SENT ? 0 : (opened & KNOWN_IDLE);
  u32 shadow = out == 1 ? SHADOW_OUTBOX : 0;
  client->unlock(mask, index, opened ^ (idle | shadow));
}

// ---- wire.rs: the encoding, little-endian bytes at fixed offsets ----------
template <class T>
struct Wire;

__device__ __forceinline__ void copy_bytes(u8* dst, const u8* src, u64 n) {
  for (u64 i = 0; i < n; ++i) dst[i] = src[i];
}

#define GPU_RPC_SCALAR_WIRE(T)                                                                    \
  template <>                                                                                     \
  struct Wire<T> {                                                                                \
    static constexpr u32 SIZE = sizeof(T);                                                        \
    static constexpr bool RAW = true;                                                             \
    __device__ static void encode(const T& v, u8* o) { copy_bytes(o, (const u8*)&v, SIZE); }      \
    __device__ static T decode(const u8* i) {                                                     \
      T v;                                                                                        \
      copy_bytes((u8*)&v, i, SIZE);                                                               \
      return v;                                                                                   \
    }                                                                                             \
  };
GPU_RPC_SCALAR_WIRE(unsigned char)
GPU_RPC_SCALAR_WIRE(signed char)
GPU_RPC_SCALAR_WIRE(unsigned short)
GPU_RPC_SCALAR_WIRE(short)
GPU_RPC_SCALAR_WIRE(unsigned int)
GPU_RPC_SCALAR_WIRE(int)
GPU_RPC_SCALAR_WIRE(unsigned long long)
GPU_RPC_SCALAR_WIRE(long long)
GPU_RPC_SCALAR_WIRE(float)
GPU_RPC_SCALAR_WIRE(double)
GPU_RPC_SCALAR_WIRE(char32_t)
#undef GPU_RPC_SCALAR_WIRE

template <>
struct Wire<bool> {
  static constexpr u32 SIZE = 1;
  static constexpr bool RAW = false;
  __device__ static void encode(const bool& v, u8* o) { o[0] = v ? 1 : 0; }
  __device__ static bool decode(const u8* i) { return i[0] != 0; }
};

// `()`.
struct Unit {};
template <>
struct Wire<Unit> {
  static constexpr u32 SIZE = 0;
  static constexpr bool RAW = false;
  __device__ static void encode(const Unit&, u8*) {}
  __device__ static Unit decode(const u8*) { return Unit{}; }
};

// `[T; N]`.
template <class T, u32 N>
struct Array {
  T items[N];
  __device__ T& operator[](u32 i) { return items[i]; }
  __device__ const T& operator[](u32 i) const { return items[i]; }
};
template <class T, u32 N>
struct Wire<Array<T, N>> {
  static constexpr u32 SIZE = N * Wire<T>::SIZE;
  static constexpr bool RAW = false;
  __device__ static void encode(const Array<T, N>& v, u8* o) {
    for (u32 k = 0; k < N; ++k) Wire<T>::encode(v.items[k], o + k * Wire<T>::SIZE);
  }
  __device__ static Array<T, N> decode(const u8* i) {
    Array<T, N> v;
    for (u32 k = 0; k < N; ++k) v.items[k] = Wire<T>::decode(i + k * Wire<T>::SIZE);
    return v;
  }
};

// `Option<T>`: a tag byte (0 none, 1 some), then the value.
template <class T>
struct Option {
  bool some;
  T value;
};
template <class T>
struct Wire<Option<T>> {
  static constexpr u32 SIZE = 1 + Wire<T>::SIZE;
  static constexpr bool RAW = false;
  __device__ static void encode(const Option<T>& v, u8* o) {
    for (u32 k = 0; k < SIZE; ++k) o[k] = 0;
    if (v.some) {
      o[0] = 1;
      Wire<T>::encode(v.value, o + 1);
    }
  }
  __device__ static Option<T> decode(const u8* i) {
    Option<T> v{};
    v.some = i[0] == 1;
    if (v.some) v.value = Wire<T>::decode(i + 1);
    return v;
  }
};

// `Result<T, E>`: a tag byte (0 ok, 1 error), then the larger of the two.
template <class T, class E>
struct Result {
  bool is_err;
  T ok;
  E err;
};
template <class T, class E>
struct Wire<Result<T, E>> {
  static constexpr u32 SIZE = 1 + (Wire<T>::SIZE > Wire<E>::SIZE ? Wire<T>::SIZE : Wire<E>::SIZE);
  static constexpr bool RAW = false;
  __device__ static void encode(const Result<T, E>& v, u8* o) {
    for (u32 k = 0; k < SIZE; ++k) o[k] = 0;
    if (v.is_err) {
      o[0] = 1;
      Wire<E>::encode(v.err, o + 1);
    } else {
      Wire<T>::encode(v.ok, o + 1);
    }
  }
  __device__ static Result<T, E> decode(const u8* i) {
    Result<T, E> v{};
    v.is_err = i[0] == 1;
    if (v.is_err)
      v.err = Wire<E>::decode(i + 1);
    else
      v.ok = Wire<T>::decode(i + 1);
    return v;
  }
};

// `&str`: bytes and a length (UTF-8; the host checks).
struct Str {
  const char* ptr;
  u64 len;
  __device__ Str(const char* s, u64 n) : ptr(s), len(n) {}
  // A NUL-terminated string, without its NUL.
  __device__ Str(const char* s) : ptr(s), len(0) {
    while (s[len] != 0) ++len;
  }
};

// `&[T]`: elements and a count.
template <class T>
struct Slice {
  const T* ptr;
  u64 len;
};

// `&mut [T]`: elements the host fills, and a count.
template <class T>
struct MutSlice {
  T* ptr;
  u64 len;
};

// ---- call/mod.rs: the call frame -------------------------------------------
// call/mod.rs `CallDesc`, as the generated client needs it.
struct CallInfo {
  u32 opcode;
  u32 signature;
  u64 frame_word;
  u32 block_len;
  u32 ret_len;
};

// call/mod.rs `spill_packets`.
__device__ __forceinline__ u64 spill_packets(u64 len) {
  return len > FIRST_PAYLOAD ? (len - FIRST_PAYLOAD + BUFFER_BYTES - 1) / BUFFER_BYTES : 0;
}

// call/mod.rs `fill_block`: packet `i`'s share of `block` into `b`.
__device__ __forceinline__ void fill_block(u64 i, const u8* block, u64 len, u64* b) {
  u64 start = i == 0 ? 0 : FIRST_PAYLOAD + (i - 1) * BUFFER_BYTES;
  u64 room = i == 0 ? FIRST_PAYLOAD : BUFFER_BYTES;
  u8* dst = (u8*)b + (i == 0 ? 8 : 0);
  if (start < len) copy_bytes(dst, block + start, (len - start) < room ? (len - start) : room);
}

// call/mod.rs `read_block`: the inverse.
__device__ __forceinline__ void read_block(u64 i, const u64* b, u8* block, u64 len) {
  u64 start = i == 0 ? 0 : FIRST_PAYLOAD + (i - 1) * BUFFER_BYTES;
  u64 room = i == 0 ? FIRST_PAYLOAD : BUFFER_BYTES;
  const u8* src = (const u8*)b + (i == 0 ? 8 : 0);
  if (start < len) copy_bytes(block + start, src, (len - start) < room ? (len - start) : room);
}

// `__private::put_len` (src/lib.rs): length word `k` of an argument block.
__device__ __forceinline__ void put_len(u8* block, u32 k, u64 len) { Wire<u64>::encode(len, block + 8 * k); }

// A call in progress (call/client.rs `ClientCall` and `ClientReply`).
struct Call {
  Port port;
  CallResult result;

  // call/client.rs `Client::begin`: open a port for the call and send the frame.
  __device__ static Call begin(Client& client, const CallInfo& info, const u8* block) {
    Call c;
    c.port = client.open(info.opcode, ((u64)info.opcode << 32) | info.signature, lanes::warp_hint());
    c.result.status = STATUS_OK;
    c.result.detail = 0;
    u64 b[BUFFER_WORDS] = {};
    b[0] = info.frame_word;
    fill_block(0, block, info.block_len, b);
    u32 first = info.block_len < FIRST_PAYLOAD ? info.block_len : FIRST_PAYLOAD;
    c.port.send_words(1 + (first + 7) / 8, b);
    u64 spill = spill_packets(info.block_len);
    for (u64 i = 0; lanes::ballot(c.port.mask, i < spill) != 0; ++i) {
      u64 p[BUFFER_WORDS] = {};
      if (i < spill) fill_block(i + 1, block, info.block_len, p);
      c.port.send_words(BUFFER_WORDS, p);
    }
    return c;
  }

  // call/client.rs `ClientCall::stream`: this lane's elements, densely packed;
  // the group loops until every lane is done (lane rule 2).
  template <class T>
  __device__ void stream(const T* items, u64 count) {
    constexpr u32 SIZE = Wire<T>::SIZE;
    u64 bytes = count * SIZE;
    u64 packets = (bytes + BUFFER_BYTES - 1) / BUFFER_BYTES;
    for (u64 i = 0; lanes::ballot(port.mask, i < packets) != 0; ++i) {
      u64 b[BUFFER_WORDS] = {};
      if (i < packets) {
        u64 start = i * BUFFER_BYTES;
        u64 end = start + BUFFER_BYTES < bytes ? start + BUFFER_BYTES : bytes;
        if (Wire<T>::RAW) {
          copy_bytes((u8*)b, (const u8*)items + start, end - start);
        } else {
          for (u64 e = start / SIZE; e * SIZE < end && e < count; ++e) {
            u8 tmp[SIZE];
            Wire<T>::encode(items[e], tmp);
            u64 es = e * SIZE;
            u64 from = start > es ? start : es;
            u64 to = end < es + SIZE ? end : es + SIZE;
            copy_bytes((u8*)b + (from - start), tmp + (from - es), to - from);
          }
        }
      }
      port.send_words(BUFFER_WORDS, b);
    }
  }

  __device__ void stream_str(const Str& s) { stream((const u8*)s.ptr, s.len); }

  // call/client.rs `ClientCall::finish_async`.
  __device__ void finish_async() { port.close(); }

  // call/client.rs `ClientCall::reply`: this lane's status and return value.
  __device__ void reply(u8* ret, u32 ret_len) {
    u64 b[BUFFER_WORDS];
    u32 first = ret_len < FIRST_PAYLOAD ? ret_len : FIRST_PAYLOAD;
    bool inline_reply = port.recv_reply_words(1 + (first + 7) / 8, b);
    result.status = (u32)b[0];
    result.detail = (u32)(b[0] >> 32);
    read_block(0, b, ret, ret_len);
    // A call refused as a whole is answered with packet 0 only.
    bool refused = result.status == STATUS_UNKNOWN_OPCODE || result.status == STATUS_SIGNATURE_MISMATCH ||
                   result.status == STATUS_BAD_FRAME || result.status == STATUS_INVALID_LANE_MASK;
    // An inline reply has no spill packets (call/client.rs says why).
    u64 spill = refused || inline_reply ? 0 : spill_packets(ret_len);
    for (u64 i = 0; lanes::ballot(port.mask, i < spill) != 0; ++i) {
      port.recv_words(BUFFER_WORDS, b);
      if (i < spill) read_block(i + 1, b, ret, ret_len);
    }
  }

  // call/client.rs `ClientReply::out`: whole elements per packet; only lanes whose
  // call succeeded receive.
  template <class T>
  __device__ void out(T* items, u64 count) {
    constexpr u32 SIZE = Wire<T>::SIZE;
    constexpr u64 per = BUFFER_BYTES / SIZE;
    u64 packets = result.ok() ? (count + per - 1) / per : 0;
    for (u64 i = 0; lanes::ballot(port.mask, i < packets) != 0; ++i) {
      u64 b[BUFFER_WORDS];
      port.recv_words(BUFFER_WORDS, b);
      if (i < packets) {
        for (u64 k = 0; k < per && i * per + k < count; ++k) items[i * per + k] = Wire<T>::decode((const u8*)b + k * SIZE);
      }
    }
  }

  __device__ void close() { port.close(); }
};

// What the panicking form does with a failed call.
__device__ __forceinline__ void fail(const char* method, CallResult r) { GPU_RPC_ON_FAILURE(method, r); }

}  // namespace gpu_rpc

#endif  // GPU_RPC_CLIENT_CUH
