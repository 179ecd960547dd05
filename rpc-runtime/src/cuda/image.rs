//! What a CUDA kernel image is: PTX text (JIT-compiled by the driver when it
//! is loaded), a cubin (an ELF file of machine code for one GPU
//! architecture, e.g. from `ptxas -arch=sm_90`: loaded without compiling) or
//! a fatbin (`nvcc -fatbin`, several of them); recognised from its bytes,
//! with the entry names each declares.

use super::CudaError;

/// `e_machine` of a cubin (`EM_CUDA`).
const EM_CUDA: u16 = 190;
/// The first word of a fatbin (`0xBA55ED50`, little-endian).
const FATBIN_MAGIC: [u8; 4] = [0x50, 0xED, 0x55, 0xBA];
/// `st_other` bit of a cubin's symbol that is a kernel entry point.
const STO_CUDA_ENTRY: u8 = 0x10;
/// ELF section types (`sh_type`) the checks look at.
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_RELA: u32 = 4;
const SHT_HASH: u32 = 5;
const SHT_DYNAMIC: u32 = 6;
const SHT_NOBITS: u32 = 8;
const SHT_REL: u32 = 9;
const SHT_DYNSYM: u32 = 11;

/// A kernel image, borrowed from the bytes it was recognised in. Only
/// [`Image::recognize`] makes one outside this crate (the variants are
/// `#[non_exhaustive]`), so every image has passed its checks.
///
/// ```
/// # use rpc_runtime as gpu_rpc;
/// use gpu_rpc::cuda::Image;
/// let ptx = b"//\n.version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
/// let image = Image::recognize(ptx)?;
/// assert!(matches!(image, Image::Ptx { .. }));
/// assert_eq!(image.entries(), Some(vec!["k".to_string()]));
/// assert!(Image::recognize(b"hello").is_err());
/// # Ok::<(), gpu_rpc::cuda::CudaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Image<'a> {
    /// PTX text.
    #[non_exhaustive]
    Ptx(&'a str),
    /// A cubin: an ELF file whose `e_machine` is `EM_CUDA`.
    #[non_exhaustive]
    Cubin(&'a [u8]),
    /// A fatbin: cubins and PTX for several architectures in one file.
    #[non_exhaustive]
    Fatbin(&'a [u8]),
}

impl<'a> Image<'a> {
    /// Recognise `bytes`: a fatbin by its magic word, a cubin by its ELF
    /// header, else PTX text ([`CudaError::NotPtx`] when it is none of
    /// them, saying why). A cubin or fatbin whose tables or sizes reach past
    /// its bytes is refused here ([`CudaError::BadImage`]): the driver
    /// trusts them, and reads past the end (a crash) where they lie.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// use gpu_rpc::cuda::{CudaError, Image};
    /// // A fatbin's magic word with a body that reaches past the bytes.
    /// let mut fatbin = vec![0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0];
    /// fatbin.extend_from_slice(&4096u64.to_le_bytes());
    /// let e = Image::recognize(&fatbin).unwrap_err();
    /// assert!(matches!(e, CudaError::BadImage { kind: "fatbin", .. }), "{e}");
    /// ```
    pub fn recognize(bytes: &'a [u8]) -> Result<Image<'a>, CudaError> {
        let damaged = |kind: &'static str| move |reason: String| CudaError::BadImage { kind, reason };
        if bytes.starts_with(&FATBIN_MAGIC) {
            check_fatbin(bytes).map_err(damaged("fatbin"))?;
            return Ok(Image::Fatbin(bytes));
        }
        if bytes.starts_with(b"\x7fELF") {
            return match elf_machine(bytes) {
                Some(EM_CUDA) => {
                    check_cubin(bytes).map_err(damaged("cubin"))?;
                    Ok(Image::Cubin(bytes))
                }
                machine => Err(CudaError::NotPtx {
                    reason: format!(
                        "an ELF file whose machine is {} instead of a cubin's EM_CUDA (190)",
                        machine.map_or("unreadable".to_string(), |m| m.to_string())
                    ),
                }),
            };
        }
        let text = std::str::from_utf8(bytes).map_err(|_| CudaError::NotPtx {
            reason: "neither UTF-8 text nor a cubin (ELF) or fatbin".to_string(),
        })?;
        check_ptx(text)?;
        Ok(Image::Ptx(text))
    }

    /// The kernel entry points the image declares, in its order: the
    /// `.entry` names of PTX, the entry symbols of a cubin; `None` for a
    /// fatbin, whose cubins may be compressed (the loaded module asks the
    /// driver instead) and for a cubin whose symbol table cannot be read.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// let ptx = b".version 8.0\n.target sm_90\n.visible .entry a() { ret; }\n.entry b() { ret; }\n";
    /// let image = gpu_rpc::cuda::Image::recognize(ptx)?;
    /// assert_eq!(image.entries(), Some(vec!["a".to_string(), "b".to_string()]));
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn entries(&self) -> Option<Vec<String>> {
        match self {
            Image::Ptx(text) => Some(ptx_entries(text)),
            Image::Cubin(elf) => cubin_entries(elf),
            Image::Fatbin(_) => None,
        }
    }

    /// What the image is, for messages: `"PTX"`, `"cubin"` or `"fatbin"`.
    ///
    /// ```
    /// # use rpc_runtime as gpu_rpc;
    /// let image = gpu_rpc::cuda::Image::recognize(b".version 8.0\n.target sm_90\n")?;
    /// assert_eq!(image.kind(), "PTX");
    /// # Ok::<(), gpu_rpc::cuda::CudaError>(())
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Image::Ptx(_) => "PTX",
            Image::Cubin(_) => "cubin",
            Image::Fatbin(_) => "fatbin",
        }
    }
}

/// Check that `text` looks like PTX: after whitespace and comments, the first
/// directive must be `.version`.
pub(super) fn check_ptx(text: &str) -> Result<(), CudaError> {
    let not_ptx = |reason: String| Err(CudaError::NotPtx { reason });
    if text.contains('\0') {
        return not_ptx("the text contains a NUL byte".to_string());
    }
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    if rest.is_empty() {
        return not_ptx("the text is empty (or only comments)".to_string());
    }
    if !rest.starts_with(".version") {
        let head: String = rest.chars().take(40).collect();
        return not_ptx(format!(
            "expected the `.version` directive that starts a PTX module, found {head:?}"
        ));
    }
    Ok(())
}

/// The `.entry` names declared in PTX text (for error messages).
pub(super) fn ptx_entries(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        while let Some(t) = tokens.next() {
            if t == ".entry" {
                if let Some(name) = tokens.next() {
                    let name = name.split('(').next().unwrap_or(name);
                    if !name.is_empty() {
                        names.push(name.to_string());
                    }
                }
                break;
            }
        }
    }
    names
}

/// Little-endian fields of an ELF64 file, each read only within its bounds.
struct Elf<'a>(&'a [u8]);

impl Elf<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        self.0.get(at..at.checked_add(N)?)?.try_into().ok()
    }
    fn u8(&self, at: usize) -> Option<u8> {
        self.0.get(at).copied()
    }
    fn u16(&self, at: usize) -> Option<u16> {
        self.bytes(at).map(u16::from_le_bytes)
    }
    fn u32(&self, at: usize) -> Option<u32> {
        self.bytes(at).map(u32::from_le_bytes)
    }
    fn u64(&self, at: usize) -> Option<usize> {
        self.bytes(at).and_then(|b| usize::try_from(u64::from_le_bytes(b)).ok())
    }
}

/// Check a cubin's structure (ELF64, little-endian): its program and
/// section header tables, every segment and section lie within its bytes,
/// no extended numbering, links between sections name sections that exist,
/// string tables end with NUL. What is inside a section (machine code, the
/// driver's own notes) is the driver's to read; this keeps its table walks
/// inside the file.
pub(super) fn check_cubin(bytes: &[u8]) -> Result<(), String> {
    let elf = Elf(bytes);
    let cut = || "cut short: its ELF header is incomplete".to_string();
    if elf.u8(4).ok_or_else(cut)? != 2 || elf.u8(5).ok_or_else(cut)? != 1 {
        return Err("not a little-endian ELF64 file".to_string());
    }
    let field = |at: usize, what: &str| elf.u64(at).ok_or_else(|| format!("cut short: no {what}"));
    let half = |at: usize, what: &str| {
        elf.u16(at)
            .map(usize::from)
            .ok_or_else(|| format!("cut short: no {what}"))
    };
    // A table of `n` entries of `size` bytes at `offset` lies within the
    // file.
    let within = |offset: usize, n: usize, size: usize, what: &str| {
        n.checked_mul(size)
            .and_then(|b| offset.checked_add(b))
            .filter(|&end| end <= bytes.len())
            .map(|_| ())
            .ok_or_else(|| {
                format!(
                    "its {what} ({n} × {size} bytes at {offset:#x}) reach past its {} bytes",
                    bytes.len()
                )
            })
    };
    let (phoff, shoff) = (field(0x20, "e_phoff")?, field(0x28, "e_shoff")?);
    let (phentsize, phnum) = (half(0x36, "e_phentsize")?, half(0x38, "e_phnum")?);
    let (shentsize, shnum) = (half(0x3a, "e_shentsize")?, half(0x3c, "e_shnum")?);
    if (phnum > 0 && phentsize < 0x38) || (shnum > 0 && shentsize < 0x40) {
        return Err(format!(
            "its table entries are too small ({phentsize} B program headers, {shentsize} B section headers)"
        ));
    }
    within(phoff, phnum, phentsize, "program headers")?;
    within(shoff, shnum, shentsize, "section headers")?;
    // No extended numbering (a count or index kept in section 0), which a
    // cubin never needs.
    let shstrndx = half(0x3e, "e_shstrndx")?;
    if (shnum == 0 && shoff != 0) || (shnum > 0 && shstrndx >= shnum) {
        return Err(format!(
            "its section count ({shnum}) or name table index ({shstrndx}) is out of range"
        ));
    }
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        within(field(ph + 8, "p_offset")?, 1, field(ph + 0x20, "p_filesz")?, "segment")?;
    }
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        let kind = elf.u32(sh + 4).ok_or_else(cut)?;
        if kind == SHT_NOBITS {
            continue;
        }
        let (offset, size) = (field(sh + 0x18, "sh_offset")?, field(sh + 0x20, "sh_size")?);
        within(offset, 1, size, "section")?;
        // Tables that name another section (symbols, relocations, hashes,
        // dynamic entries) name one that exists.
        let link = elf.u32(sh + 0x28).ok_or_else(cut)? as usize;
        if matches!(
            kind,
            SHT_SYMTAB | SHT_RELA | SHT_HASH | SHT_DYNAMIC | SHT_REL | SHT_DYNSYM
        ) && link >= shnum
        {
            return Err(format!("its section {i} links to section {link} of {shnum}"));
        }
        // A string table ends its last string.
        if kind == SHT_STRTAB && size > 0 && bytes[offset + size - 1] != 0 {
            return Err(format!("its string table (section {i}) does not end with NUL"));
        }
    }
    Ok(())
}

/// Check that a fatbin's sizes lie within its bytes: the header's (magic,
/// version, header size, size of what follows), each entry's (header size
/// and payload size), and the ELF tables of each cubin stored uncompressed
/// in it ([`check_cubin`]).
pub(super) fn check_fatbin(bytes: &[u8]) -> Result<(), String> {
    let f = Elf(bytes);
    let cut = |what: &str| format!("cut short: no {what}");
    let header = f.u16(6).ok_or_else(|| cut("header size"))? as usize;
    let size = f.u64(8).ok_or_else(|| cut("size"))?;
    let end = header
        .checked_add(size)
        .filter(|&e| header >= 16 && e <= bytes.len())
        .ok_or_else(|| {
            format!(
                "its header ({header} B) and body ({size} B) reach past its {} bytes",
                bytes.len()
            )
        })?;
    let mut at = header;
    while at < end {
        let entry_header = f.u32(at + 4).ok_or_else(|| cut("entry header"))? as usize;
        let payload = f.u64(at + 8).ok_or_else(|| cut("entry size"))?;
        let start = at + entry_header;
        let next = start
            .checked_add(payload)
            .filter(|&n| entry_header >= 16 && n <= end)
            .ok_or_else(|| {
                format!("its entry at {at:#x} ({entry_header} B header, {payload} B) reaches past its body")
            })?;
        let body = &bytes[start..next];
        if body.starts_with(b"\x7fELF") {
            check_cubin(body).map_err(|e| format!("the cubin at {start:#x}: {e}"))?;
        }
        at = next;
    }
    Ok(())
}

/// `e_machine` of an ELF header (at byte 18 in both ELF classes).
fn elf_machine(bytes: &[u8]) -> Option<u16> {
    Elf(bytes).u16(18)
}

/// The entry symbols of a cubin (ELF64, little-endian): function symbols
/// marked `STO_CUDA_ENTRY`, named from the symbol table's string table.
/// `None` when the file is not such an ELF or a table lies outside it: it
/// reads any bytes safely, checked by [`check_cubin`] or not.
pub(super) fn cubin_entries(bytes: &[u8]) -> Option<Vec<String>> {
    const STT_FUNC: u8 = 2;
    let elf = Elf(bytes);
    // ELFCLASS64, little-endian.
    if elf.u8(4)? != 2 || elf.u8(5)? != 1 {
        return None;
    }
    let (shoff, shentsize, shnum) = (elf.u64(0x28)?, elf.u16(0x3a)? as usize, elf.u16(0x3c)? as usize);
    if shentsize < 0x40 {
        return None;
    }
    // Where section header `i` starts, if inside the file (so the field
    // offsets added to it below cannot overflow).
    let section = |i: usize| -> Option<usize> {
        shoff
            .checked_add(i.checked_mul(shentsize)?)
            .filter(|&at| at <= bytes.len())
    };
    let mut names = Vec::new();
    for i in 0..shnum {
        let sh = section(i)?;
        if elf.u32(sh + 4)? != SHT_SYMTAB {
            continue;
        }
        let (offset, size, link, entsize) = (
            elf.u64(sh + 0x18)?,
            elf.u64(sh + 0x20)?,
            elf.u32(sh + 0x28)? as usize,
            elf.u64(sh + 0x38)?,
        );
        let strings = section(link)?;
        let (str_offset, str_size) = (elf.u64(strings + 0x18)?, elf.u64(strings + 0x20)?);
        let table = bytes.get(str_offset..str_offset.checked_add(str_size)?)?;
        if entsize < 24 {
            return None;
        }
        for k in 0..size / entsize {
            let sym = offset.checked_add(k * entsize).filter(|&at| at <= bytes.len())?;
            let (name, info, other) = (elf.u32(sym)? as usize, elf.u8(sym + 4)?, elf.u8(sym + 5)?);
            if info & 0xf != STT_FUNC || other & STO_CUDA_ENTRY == 0 {
                continue;
            }
            let tail = table.get(name..)?;
            let end = tail.iter().position(|&b| b == 0)?;
            names.push(String::from_utf8_lossy(&tail[..end]).into_owned());
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_header_check() {
        assert!(check_ptx("//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.8\n.target sm_90\n").is_ok());
        assert!(check_ptx("/* c */ .version 8.0").is_ok());
        assert!(check_ptx("  \n.version 8.0").is_ok());
        for bad in [
            "",
            "// only a comment",
            "hello world",
            "\u{7f}ELF",
            ".target sm_90\n.version 8.0",
            ".version\0",
        ] {
            let e = check_ptx(bad).unwrap_err();
            assert!(e.to_string().starts_with("gpu_rpc cuda: not PTX text"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn entry_names() {
        let ptx = ".version 7.8\n.visible .entry rpc_noop_kernel(\n.param .align 8 .b8 p[24]\n)\n{ ret; }\n.entry other ( ) { ret; }\n.func helper() { ret; }\n";
        assert_eq!(ptx_entries(ptx), ["rpc_noop_kernel", "other"]);
    }

    /// A minimal ELF64 cubin: a null section, a string table, a symbol
    /// table of `syms` (name, `st_info`, `st_other`).
    fn cubin(syms: &[(&str, u8, u8)]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24]; // the null symbol
        for &(name, info, other) in syms {
            let at = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            let mut s = [0u8; 24];
            s[..4].copy_from_slice(&at.to_le_bytes());
            s[4] = info;
            s[5] = other;
            symtab.extend_from_slice(&s);
        }
        let (str_at, sym_at) = (64usize, 64 + strtab.len());
        let sh_at = sym_at + symtab.len();
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // ELFCLASS64
        f[5] = 1; // little-endian
        f[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        f[0x28..0x30].copy_from_slice(&(sh_at as u64).to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f.extend_from_slice(&strtab);
        f.extend_from_slice(&symtab);
        let header = |kind: u32, offset: usize, size: usize, link: u32, entsize: u64| {
            let mut h = [0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(offset as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
            h[0x38..0x40].copy_from_slice(&entsize.to_le_bytes());
            h
        };
        f.extend_from_slice(&[0u8; 64]);
        f.extend_from_slice(&header(3, str_at, strtab.len(), 0, 0));
        f.extend_from_slice(&header(2, sym_at, symtab.len(), 1, 24));
        f
    }

    /// A fatbin holding `cubin` as its one entry (the layout `fatbinary`
    /// writes: a 16-byte header, then a 64-byte entry header and the ELF).
    fn fatbin(cubin: &[u8]) -> Vec<u8> {
        let mut f = FATBIN_MAGIC.to_vec();
        f.extend_from_slice(&1u16.to_le_bytes()); // version
        f.extend_from_slice(&16u16.to_le_bytes()); // header size
        f.extend_from_slice(&(64 + cubin.len() as u64).to_le_bytes());
        let mut entry = [0u8; 64];
        entry[..2].copy_from_slice(&2u16.to_le_bytes()); // an ELF
        entry[4..8].copy_from_slice(&64u32.to_le_bytes());
        entry[8..16].copy_from_slice(&(cubin.len() as u64).to_le_bytes());
        f.extend_from_slice(&entry);
        f.extend_from_slice(cubin);
        f
    }

    /// Whether `bytes` are refused as a damaged image of `kind`, with a
    /// reason containing `why`.
    fn damaged(bytes: &[u8], kind: &str, why: &str) -> bool {
        match Image::recognize(bytes) {
            Err(CudaError::BadImage { kind: k, reason }) => k == kind && reason.contains(why),
            other => panic!("{kind} ({why}): {other:?}"),
        }
    }

    #[test]
    fn damaged_images_never_reach_the_driver() {
        let elf = cubin(&[("k", 0x12, STO_CUDA_ENTRY)]);
        // A cubin header over garbage: its section table far outside.
        let mut garbage = vec![0xa5u8; 4096];
        garbage[..6].copy_from_slice(b"\x7fELF\x02\x01");
        garbage[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        assert!(damaged(&garbage, "cubin", "reach past"));
        // Cut anywhere after its header, the cubin's tables reach past it.
        for len in [64, 70, elf.len() - 100, elf.len() - 1] {
            assert!(damaged(&elf[..len], "cubin", ""), "{len}");
        }
        assert!(damaged(&elf[..30], "cubin", "cut short"));
        // A section whose size reaches past the file.
        let mut big = elf.clone();
        let shoff = u64::from_le_bytes(big[0x28..0x30].try_into().unwrap()) as usize;
        big[shoff + 64 + 0x20..shoff + 64 + 0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(damaged(&big, "cubin", "section"));
        // Extended numbering, a name table that does not exist, a symbol
        // table linked to a section that does not exist, a string table
        // that does not end its last string.
        let mut ext = elf.clone();
        ext[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        assert!(damaged(&ext, "cubin", "out of range"));
        let mut names = elf.clone();
        names[0x3e..0x40].copy_from_slice(&3u16.to_le_bytes());
        assert!(damaged(&names, "cubin", "out of range"));
        let mut link = elf.clone();
        link[shoff + 128 + 0x28..shoff + 128 + 0x2c].copy_from_slice(&7u32.to_le_bytes());
        assert!(damaged(&link, "cubin", "links to section 7"));
        let mut unended = elf.clone();
        unended[64 + 2] = b'x'; // the NUL after "k" (strings at 64: "\0k\0")
        assert!(damaged(&unended, "cubin", "does not end with NUL"));

        let fat = fatbin(&elf);
        assert!(damaged(&fat[..fat.len() - 1], "fatbin", "reach past"));
        let mut garbage = vec![0xa5u8; 4096];
        garbage[..4].copy_from_slice(&FATBIN_MAGIC);
        assert!(damaged(&garbage, "fatbin", "reach past"));
        // An entry whose payload is longer than the body.
        let mut long = fat.clone();
        long[16 + 8..16 + 16].copy_from_slice(&(elf.len() as u64 + 1).to_le_bytes());
        assert!(damaged(&long, "fatbin", "entry at 0x10"));
        // The cubin inside is checked too.
        let mut inner = fat.clone();
        inner[16 + 64 + 0x28..16 + 64 + 0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(damaged(&inner, "fatbin", "the cubin at 0x50"));
    }

    proptest::proptest! {
        /// A valid cubin or fatbin with bytes overwritten and cut anywhere:
        /// `recognize`, `entries` and the symbol reader answer (an image, an
        /// error, `None`), never panic or read out of bounds.
        #[test]
        fn damaged_images_never_panic(
            fat in proptest::bool::ANY,
            writes in proptest::collection::vec((0usize..2048, proptest::num::u8::ANY), 0..8),
            cut in 0usize..2048,
        ) {
            let elf = cubin(&[("k1", 0x12, STO_CUDA_ENTRY), ("k2", 0x12, STO_CUDA_ENTRY)]);
            let mut bytes = if fat { fatbin(&elf) } else { elf };
            let n = bytes.len();
            for (at, b) in writes {
                bytes[at % n] = b;
            }
            bytes.truncate(n - cut % n);
            if let Ok(image) = Image::recognize(&bytes) {
                let _ = (image.entries(), image.kind());
            }
            // The symbol reader on its own, unchecked bytes included.
            let _ = cubin_entries(&bytes);
        }
    }

    #[test]
    fn images_are_recognised_by_their_first_bytes() {
        let entry = |name| (name, 0x12, STO_CUDA_ENTRY); // GLOBAL FUNC, entry
        let elf = cubin(&[entry("k1"), ("helper", 0x02, 0), ("data", 0x11, 0), entry("k2")]);
        let image = Image::recognize(&elf).unwrap();
        assert_eq!(image.kind(), "cubin");
        assert_eq!(image.entries(), Some(vec!["k1".to_string(), "k2".to_string()]));
        // Cut anywhere inside its tables, the cubin's entries are unknown,
        // never read out of bounds.
        for len in [70, 80, elf.len() - 100, elf.len() - 1] {
            assert_eq!(cubin_entries(&elf[..len]), None, "{len}");
        }
        let mut amd = elf.clone();
        amd[18..20].copy_from_slice(&224u16.to_le_bytes());
        let e = Image::recognize(&amd).unwrap_err().to_string();
        assert!(e.contains("machine is 224"), "{e}");

        let fat = fatbin(&elf);
        let image = Image::recognize(&fat).unwrap();
        assert_eq!((image.kind(), image.entries()), ("fatbin", None));

        assert_eq!(Image::recognize(b".version 8.0\n").unwrap().kind(), "PTX");
        let e = Image::recognize(&[0xff, 0xfe, 0]).unwrap_err().to_string();
        assert!(e.contains("neither UTF-8 text nor a cubin"), "{e}");
    }
}
