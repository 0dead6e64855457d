//! Go's function table, `.gopclntab`: every function's name, entry address and size, which the
//! Go runtime itself needs (stack traces, the garbage collector), so stripping keeps it.
//!
//! The layouts are those of the Go sources: `runtime/symtab.go` (`pcHeader`, `functab`,
//! `_func`) and `cmd/link/internal/ld/pcln.go`, which writes them; `debug/gosym/pclntab.go`
//! reads them. Every read here is bounds-checked: a hostile table gives an error, never a panic.

/// Go 1.20 and later.
pub(crate) const MAGIC_GO1_20: u32 = 0xffff_fff1;
/// Go 1.18 and 1.19: the same layout as 1.20.
pub(crate) const MAGIC_GO1_18: u32 = 0xffff_fff0;
/// Go 1.16 and 1.17: no `textStart`; entries are full addresses, pointer-sized.
pub(crate) const MAGIC_GO1_16: u32 = 0xffff_fffa;

/// What went wrong reading a table, before the caller names the file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TableError {
    /// A magic this reader does not know.
    Unsupported(u32),
    /// The table is inconsistent; says what.
    Corrupt(String),
}

fn corrupt(what: impl Into<String>) -> TableError {
    TableError::Corrupt(what.into())
}

/// One function as the table gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawFunction {
    pub name: String,
    pub address: u64,
    pub size: u64,
    /// False where the function has no pc tables (C code linked in by cgo): then its size
    /// runs to the next function, the padding between them included.
    pub exact_size: bool,
}

/// The functions of a table, in address order, and the Go version range its magic implies.
#[derive(Debug)]
pub(crate) struct Table {
    pub magic: u32,
    pub functions: Vec<RawFunction>,
}

/// Byte order and pointer size of the table, with checked reads.
#[derive(Clone, Copy)]
struct Reader<'a> {
    data: &'a [u8],
    big_endian: bool,
    ptr_bytes: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&self, at: u64, len: usize, what: &str) -> Result<&'a [u8], TableError> {
        let start = usize::try_from(at).map_err(|_| corrupt(format!("{what} out of range")))?;
        start
            .checked_add(len)
            .and_then(|end| self.data.get(start..end))
            .ok_or_else(|| {
                corrupt(format!(
                    "{what} at offset {at:#x} lies past the end of the table ({:#x} bytes)",
                    self.data.len()
                ))
            })
    }

    fn u32(&self, at: u64, what: &str) -> Result<u32, TableError> {
        let b: [u8; 4] = self.bytes(at, 4, what)?.try_into().expect("4 bytes");
        Ok(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn word(&self, at: u64, what: &str) -> Result<u64, TableError> {
        let b = self.bytes(at, self.ptr_bytes, what)?;
        Ok(match (self.ptr_bytes, self.big_endian) {
            (4, false) => u32::from_le_bytes(b.try_into().expect("4 bytes")).into(),
            (4, true) => u32::from_be_bytes(b.try_into().expect("4 bytes")).into(),
            (_, false) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            (_, true) => u64::from_be_bytes(b.try_into().expect("8 bytes")),
        })
    }

    /// The NUL-terminated string at `at`, its end found in `nuls` (the offsets of every NUL
    /// byte, ascending): one binary search, where scanning would let a hostile table that
    /// points every name at one long run without a NUL cost a scan of the run per function.
    fn c_string(&self, at: u64, nuls: &[usize], what: &str) -> Result<String, TableError> {
        let start = usize::try_from(at)
            .ok()
            .filter(|&s| s < self.data.len())
            .ok_or_else(|| corrupt(format!("{what} at offset {at:#x} lies past the end")))?;
        let end = nuls
            .get(nuls.partition_point(|&nul| nul < start))
            .copied()
            .ok_or_else(|| corrupt(format!("{what} at offset {at:#x} has no terminating NUL")))?;
        Ok(String::from_utf8_lossy(&self.data[start..end]).into_owned())
    }
}

/// The header fields every supported layout has, as offsets from the start of the table.
struct Header {
    magic: u32,
    quantum: u64,
    nfunc: u64,
    /// Base of the 1.18+ entry offsets; 0 in 1.16-1.17 (full addresses) and, from some Go
    /// version on, 0 in the file too (the runtime fills it in): then the caller's text start.
    text_start: u64,
    funcname: u64,
    /// The table after the names (the compilation units): where the names end.
    cu: u64,
    pctab: u64,
    pcln: u64,
}

fn header(data: &[u8], text_section: Option<u64>) -> Result<(Reader<'_>, Header), TableError> {
    let head: [u8; 8] = data
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| corrupt("the header is cut short"))?;
    let le = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
    let be = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
    let known = |m: u32| matches!(m, MAGIC_GO1_20 | MAGIC_GO1_18 | MAGIC_GO1_16);
    let (magic, big_endian) = if known(le) {
        (le, false)
    } else if known(be) {
        (be, true)
    } else {
        return Err(TableError::Unsupported(le));
    };
    // runtime/symtab.go, pcHeader: two zero pad bytes, the instruction size quantum, the
    // pointer size.
    if head[4] != 0 || head[5] != 0 {
        return Err(corrupt("nonzero header padding"));
    }
    let quantum = head[6];
    if !matches!(quantum, 1 | 2 | 4) {
        return Err(corrupt(format!("instruction size quantum {quantum}")));
    }
    let ptr_bytes = head[7];
    if !matches!(ptr_bytes, 4 | 8) {
        return Err(corrupt(format!("pointer size {ptr_bytes}")));
    }
    let r = Reader {
        data,
        big_endian,
        ptr_bytes: ptr_bytes.into(),
    };
    let p = u64::from(ptr_bytes);
    let word = |i: u64, what: &str| r.word(8 + i * p, what);
    let nfunc = word(0, "the function count")?;
    let h = if magic == MAGIC_GO1_16 {
        Header {
            magic,
            quantum: quantum.into(),
            nfunc,
            text_start: 0,
            funcname: word(2, "the name table offset")?,
            cu: word(3, "the compilation unit table offset")?,
            pctab: word(5, "the pc table offset")?,
            pcln: word(6, "the function table offset")?,
        }
    } else {
        let in_file = word(2, "the text start")?;
        let text_start = match (in_file, text_section) {
            (0, Some(text)) => text,
            (0, None) => {
                return Err(corrupt(
                    "no text start: neither the table nor a .text section gives one",
                ))
            }
            (start, _) => start,
        };
        Header {
            magic,
            quantum: quantum.into(),
            nfunc,
            text_start,
            funcname: word(3, "the name table offset")?,
            cu: word(4, "the compilation unit table offset")?,
            pctab: word(6, "the pc table offset")?,
            pcln: word(7, "the function table offset")?,
        }
    };
    Ok((r, h))
}

/// Reads the functions of a `.gopclntab`. `text_section` is the address of the `.text`
/// section, used where the table leaves its text start 0 for the runtime to fill in.
pub(crate) fn parse(data: &[u8], text_section: Option<u64>) -> Result<Table, TableError> {
    let (r, h) = header(data, text_section)?;
    // Each function takes at least one table entry: a count past what the table can hold is
    // corrupt, and checking first keeps a hostile count from sizing an allocation.
    let entry_bytes: u64 = if h.magic == MAGIC_GO1_16 {
        2 * r.ptr_bytes as u64
    } else {
        8
    };
    let room = (data.len() as u64).saturating_sub(h.pcln) / entry_bytes;
    if h.nfunc == 0 || h.nfunc >= room {
        return Err(corrupt(format!(
            "{} functions do not fit the function table at {:#x}",
            h.nfunc, h.pcln
        )));
    }
    // The function table: nfunc entries plus one whose entry is the end of the text.
    let entry = |i: u64| -> Result<(u64, u64), TableError> {
        let at = h.pcln + i * entry_bytes;
        if h.magic == MAGIC_GO1_16 {
            let p = r.ptr_bytes as u64;
            Ok((
                r.word(at, "a function entry")?,
                r.word(at + p, "a function offset")?,
            ))
        } else {
            let off = r.u32(at, "a function entry")?;
            let address = h
                .text_start
                .checked_add(off.into())
                .ok_or_else(|| corrupt("a function entry overflows the address space"))?;
            Ok((address, r.u32(at + 4, "a function offset")?.into()))
        }
    };
    let mut functions = Vec::with_capacity(h.nfunc as usize);
    // The names lie between their table's offset and the next table's (runtime/symtab.go:
    // funcnametab, then cutab).
    let names = usize::try_from(h.funcname)
        .ok()
        .zip(usize::try_from(h.cu).ok())
        .filter(|(start, end)| start < end && *end <= data.len())
        .ok_or_else(|| corrupt(format!("name table from {:#x} to {:#x}", h.funcname, h.cu)))?;
    let nuls: Vec<usize> = (names.0..names.1).filter(|&i| data[i] == 0).collect();
    // The pc table steps all functions may take together: a real table takes about one per
    // two bytes of pc tables; a hostile one could send every function through one long table.
    let mut steps_left = 2 * data.len() + 1_000_000;
    // The name bytes all functions may take together: names share bytes only where two
    // functions have one name (an ABI wrapper's), so a table whose names add up to many times
    // the name table points them into each other, and would make a huge copy of a small file.
    let mut name_bytes_left = 4 * (names.1 - names.0) + 65536;
    let (mut address, mut func_off) = entry(0)?;
    for i in 0..h.nfunc {
        let (next, next_off) = entry(i + 1)?;
        if next <= address {
            return Err(corrupt(format!(
                "function table out of order at entry {i} ({address:#x}, then {next:#x})"
            )));
        }
        let span = next - address;
        let info = h
            .pcln
            .checked_add(func_off)
            .ok_or_else(|| corrupt("a function offset overflows"))?;
        // _func: the entry (u32 offset from 1.18, a full address before), the name offset
        // (i32, into the name table), args, deferreturn, then pcsp (into the pc tables).
        let entry_field = if h.magic == MAGIC_GO1_16 {
            r.ptr_bytes as u64
        } else {
            4
        };
        let name_off = r.u32(info + entry_field, "a function's name offset")? as i32;
        let name_at = u64::try_from(name_off)
            .ok()
            .and_then(|n| h.funcname.checked_add(n))
            .ok_or_else(|| corrupt(format!("name offset {name_off} of entry {i}")))?;
        let name = r.c_string(name_at, &nuls, "a function name")?;
        name_bytes_left = name_bytes_left
            .checked_sub(name.len())
            .ok_or_else(|| corrupt("function names overlap far more than a Go table's do"))?;
        if name.is_empty() {
            return Err(corrupt(format!("entry {i} at {address:#x} has no name")));
        }
        let pcsp = r.u32(info + entry_field + 12, "a function's pcsp offset")?;
        let (size, exact_size) = match code_bytes(&r, &h, pcsp, &mut steps_left) {
            Some(size) if size > 0 && size <= span => (size, true),
            _ => (span, false),
        };
        functions.push(RawFunction {
            name,
            address,
            size,
            exact_size,
        });
        (address, func_off) = (next, next_off);
    }
    Ok(Table {
        magic: h.magic,
        functions,
    })
}

/// A function's code size, from its pc-to-stack-pointer table: the compiler ends every pc-value
/// table at the function's last byte (`cmd/internal/obj/pcln.go`, funcpctab), so the pc deltas
/// add up to the code size without the padding the linker puts before the next function (which
/// the distance between two entries includes). `None` where the table is absent or unreadable,
/// or `steps_left` runs out.
fn code_bytes(r: &Reader<'_>, h: &Header, pcsp: u32, steps_left: &mut usize) -> Option<u64> {
    if pcsp == 0 {
        return None;
    }
    let start = usize::try_from(h.pctab.checked_add(pcsp.into())?).ok()?;
    let mut p = r.data.get(start..)?;
    let mut pc: u64 = 0;
    let mut first = true;
    // Each step takes two bytes at least, so this ends within the table.
    loop {
        *steps_left = steps_left.checked_sub(1)?;
        let (value_delta, n) = uvarint32(p)?;
        p = &p[n..];
        if value_delta == 0 && !first {
            return Some(pc);
        }
        first = false;
        let (pc_delta, n) = uvarint32(p)?;
        p = &p[n..];
        pc = pc.checked_add(u64::from(pc_delta) * h.quantum)?;
    }
}

/// A little-endian base-128 varint of at most 32 bits, as the pc tables hold; with its length.
fn uvarint32(data: &[u8]) -> Option<(u32, usize)> {
    let mut value: u32 = 0;
    for (i, &b) in data.iter().enumerate().take(5) {
        value |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Builds a Go 1.20-layout table (little endian, 8-byte pointers) for tests and the fuzz
/// corpus: `functions` are (name, entry offset from `text_start`, code bytes), in order; the
/// last function ends at `end_offset`.
#[doc(hidden)]
pub fn synthetic_table(
    text_start: u64,
    functions: &[(&str, u32, u32)],
    end_offset: u32,
) -> Vec<u8> {
    let n = functions.len() as u64;
    let header_bytes = 8 + 8 * 8;
    let mut names = Vec::new();
    let mut name_offs = Vec::new();
    for (name, _, _) in functions {
        name_offs.push(names.len() as u32);
        names.extend_from_slice(name.as_bytes());
        names.push(0);
    }
    // One pcsp table per function: a value delta of +1 (zigzag 2) over the code size, then 0.
    let mut pctab = vec![0u8]; // offset 0 means "no table"
    let mut pcsp_offs = Vec::new();
    for (_, _, size) in functions {
        pcsp_offs.push(pctab.len() as u32);
        pctab.push(2);
        let mut s = *size;
        loop {
            let b = (s & 0x7f) as u8;
            s >>= 7;
            if s == 0 {
                pctab.push(b);
                break;
            }
            pctab.push(b | 0x80);
        }
        pctab.push(0);
    }
    let funcname = header_bytes;
    let pctab_off = funcname + names.len() as u64;
    let pcln = pctab_off + pctab.len() as u64;
    let func_bytes = 44u64;
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC_GO1_20.to_le_bytes());
    out.extend_from_slice(&[0, 0, 1, 8]);
    let cu = funcname + names.len() as u64;
    for w in [n, 0, text_start, funcname, cu, cu, pctab_off, pcln] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(&names);
    out.extend_from_slice(&pctab);
    let ftab_bytes = (n + 1) * 8;
    for (i, (_, entry, _)) in functions.iter().enumerate() {
        out.extend_from_slice(&entry.to_le_bytes());
        out.extend_from_slice(&((ftab_bytes + i as u64 * func_bytes) as u32).to_le_bytes());
    }
    out.extend_from_slice(&end_offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for (i, (_, entry, _)) in functions.iter().enumerate() {
        let mut f = [0u8; 44];
        f[0..4].copy_from_slice(&entry.to_le_bytes());
        f[4..8].copy_from_slice(&name_offs[i].to_le_bytes());
        f[16..20].copy_from_slice(&pcsp_offs[i].to_le_bytes());
        out.extend_from_slice(&f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        synthetic_table(
            0x401000,
            &[
                ("main.main", 0, 0x30),
                ("main.helper", 0x40, 0x1c),
                ("runtime.end", 0x60, 0x10),
            ],
            0x80,
        )
    }

    #[test]
    fn functions_come_with_names_addresses_and_code_sizes() {
        let t = parse(&sample(), None).unwrap();
        assert_eq!(t.magic, MAGIC_GO1_20);
        let got: Vec<_> = t
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.address, f.size))
            .collect();
        assert_eq!(
            got,
            [
                ("main.main", 0x401000, 0x30),
                ("main.helper", 0x401040, 0x1c),
                ("runtime.end", 0x401060, 0x10)
            ]
        );
    }

    /// A Go 1.16-1.17 table (magic 0xfffffffa): no text start, and the function table holds
    /// full addresses and offsets, pointer-sized; `_func` starts with the full entry address.
    fn go1_16_table(functions: &[(&str, u64, u32)], end: u64) -> Vec<u8> {
        let n = functions.len() as u64;
        let funcname = 8 + 7 * 8;
        let mut names = Vec::new();
        let mut name_offs = Vec::new();
        for (name, _, _) in functions {
            name_offs.push(names.len() as u32);
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        let pctab = funcname + names.len() as u64;
        let mut pcsp = vec![0u8];
        let mut pcsp_offs = Vec::new();
        for (_, _, size) in functions {
            pcsp_offs.push(pcsp.len() as u32);
            pcsp.extend_from_slice(&[2, *size as u8, 0]);
        }
        let pcln = pctab + pcsp.len() as u64;
        let mut out = MAGIC_GO1_16.to_le_bytes().to_vec();
        out.extend_from_slice(&[0, 0, 1, 8]);
        for w in [n, 0, funcname, pctab, pctab, pctab, pcln] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&names);
        out.extend_from_slice(&pcsp);
        let ftab = (n + 1) * 16;
        for (i, (_, entry, _)) in functions.iter().enumerate() {
            out.extend_from_slice(&entry.to_le_bytes());
            out.extend_from_slice(&(ftab + i as u64 * 40).to_le_bytes());
        }
        out.extend_from_slice(&end.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        for (i, (_, entry, _)) in functions.iter().enumerate() {
            let mut f = [0u8; 40];
            f[0..8].copy_from_slice(&entry.to_le_bytes());
            f[8..12].copy_from_slice(&name_offs[i].to_le_bytes());
            f[20..24].copy_from_slice(&pcsp_offs[i].to_le_bytes());
            out.extend_from_slice(&f);
        }
        out
    }

    #[test]
    fn a_go1_16_table_reads_with_full_addresses() {
        let data = go1_16_table(
            &[("main.main", 0x401000, 0x30), ("main.f", 0x401040, 0x11)],
            0x401060,
        );
        let t = parse(&data, None).unwrap();
        assert_eq!(t.magic, MAGIC_GO1_16);
        let got: Vec<_> = t
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.address, f.size, f.exact_size))
            .collect();
        assert_eq!(
            got,
            [
                ("main.main", 0x401000, 0x30, true),
                ("main.f", 0x401040, 0x11, true)
            ]
        );
    }

    #[test]
    fn a_zero_text_start_is_taken_from_the_text_section() {
        let data = synthetic_table(0, &[("main.main", 0x10, 8)], 0x20);
        let t = parse(&data, Some(0x401000)).unwrap();
        assert_eq!(t.functions[0].address, 0x401010);
        assert!(matches!(parse(&data, None), Err(TableError::Corrupt(_))));
    }

    #[test]
    fn unknown_magics_are_unsupported_and_name_the_magic() {
        let mut data = sample();
        data[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
        assert_eq!(
            parse(&data, None).unwrap_err(),
            TableError::Unsupported(0xffff_fffb)
        );
    }

    #[test]
    fn every_truncation_is_an_error_or_the_whole_table() {
        // The last function's record has fields past those read: a cut there loses nothing.
        let data = sample();
        let whole = parse(&data, None).unwrap().functions;
        for len in 0..data.len() {
            if let Ok(t) = parse(&data[..len], None) {
                assert_eq!(t.functions, whole, "cut at {len}");
                assert!(len > data.len() - 44, "cut at {len} read");
            }
        }
    }

    #[test]
    fn a_function_count_past_the_table_is_corrupt() {
        let mut data = sample();
        data[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let Err(TableError::Corrupt(what)) = parse(&data, None) else {
            panic!("accepted");
        };
        assert!(what.contains("do not fit"), "{what}");
    }

    /// Every name pointed at one long name: a copy many times the file's size, refused.
    #[test]
    fn names_all_pointed_at_one_long_name_are_corrupt() {
        let long = "x".repeat(4000);
        let mut functions: Vec<(&str, u32, u32)> = vec![(long.as_str(), 0, 8)];
        functions.extend((1..2000).map(|i| ("a", i * 16, 8)));
        let mut data = synthetic_table(0x1000, &functions, 2000 * 16);
        assert_eq!(parse(&data, None).unwrap().functions.len(), 2000);
        // Each _func (44 bytes, after the 2001 entries of the function table) names offset 0.
        let pcln = u64::from_le_bytes(data[64..72].try_into().unwrap()) as usize;
        let funcs = pcln + 2001 * 8;
        for i in 0..2000 {
            let at = funcs + i * 44 + 4;
            data[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        }
        let Err(TableError::Corrupt(what)) = parse(&data, None) else {
            panic!("accepted");
        };
        assert!(what.contains("overlap"), "{what}");
    }

    #[test]
    fn entries_out_of_order_are_corrupt() {
        let data = synthetic_table(0x1000, &[("a", 0x40, 4), ("b", 0x10, 4)], 0x80);
        assert!(
            matches!(parse(&data, None), Err(TableError::Corrupt(w)) if w.contains("out of order"))
        );
    }

    #[test]
    fn a_size_from_pcsp_past_the_next_entry_falls_back_to_the_gap() {
        let data = synthetic_table(0x1000, &[("a", 0, 0x100), ("b", 0x10, 4)], 0x20);
        let t = parse(&data, None).unwrap();
        assert_eq!(t.functions[0].size, 0x10);
        assert!(!t.functions[0].exact_size && t.functions[1].exact_size);
    }

    #[test]
    fn every_flipped_byte_is_an_error_or_a_table() {
        let mut data = sample();
        for at in 0..data.len() {
            for flip in [0x01, 0x80, 0xff] {
                data[at] ^= flip;
                let _ = parse(&data, Some(0x401000));
                data[at] ^= flip;
            }
        }
    }
}
