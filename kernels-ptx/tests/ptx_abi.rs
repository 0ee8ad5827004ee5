//! The kernel ABI, checked without a GPU: the committed `kernels.ptx` against the host tables
//! that the launches are typed by (`ferrax_kernels::launch::HOST_ENTRIES`). For every
//! `.visible .entry`:
//! * there is a host entry of that name, and every host entry is in the PTX;
//! * its one parameter is `.param .align A .b8 NAME_param_0[S]` with `A` and `S` the
//!   alignment and size of the entry's argument struct;
//! * every `ld.param` in its body reads exactly one field of that struct: its offset and its
//!   size, and the parameter is used in no other way.
//!
//! A field added, removed, resized or reordered without rebuilding the PTX (or a PTX entry
//! rebuilt from another struct) fails here instead of corrupting memory on a GPU.

use ferrax_kernels::launch::{ArgsLayout, Field, HOST_ENTRIES};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One `.visible .entry` of the PTX: its parameters' declarations and its body's lines.
struct PtxEntry {
    params: Vec<String>,
    body: Vec<String>,
}

fn parse_entries(ptx: &str) -> BTreeMap<String, PtxEntry> {
    let mut entries = BTreeMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim().strip_prefix(".visible .entry ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap().trim().to_string();
        let mut params = Vec::new();
        // `NAME(` then one parameter a line, then `)`; possibly `NAME()` on one line.
        if !rest.contains(')') {
            for line in lines.by_ref() {
                let line = line.trim();
                if line.starts_with(')') {
                    break;
                }
                params.push(line.trim_end_matches(',').to_string());
            }
        }
        // Directives (`.maxntid`), then the body between `{` and the `}` that closes it.
        for line in lines.by_ref() {
            if line.trim() == "{" {
                break;
            }
        }
        let mut body = Vec::new();
        let mut depth = 1;
        for line in lines.by_ref() {
            let line = line.trim();
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth == 0 {
                break;
            }
            body.push(line.to_string());
        }
        assert!(
            entries
                .insert(name.clone(), PtxEntry { params, body })
                .is_none(),
            "entry {name} twice in the PTX"
        );
    }
    entries
}

/// `.param .align A .b8 NAME[S]` as `(A, NAME, S)`.
fn byval_param(decl: &str) -> Option<(usize, &str, usize)> {
    let rest = decl.strip_prefix(".param .align ")?;
    let (align, rest) = rest.split_once(" .b8 ")?;
    let (name, size) = rest.strip_suffix(']')?.split_once('[')?;
    Some((align.parse().ok()?, name, size.parse().ok()?))
}

/// An `ld.param[.vN].{b,u,s}W DST, [PARAM+OFF]` as `(lanes, W / 8, PARAM, OFF)`.
fn param_load(line: &str) -> Option<(usize, usize, &str, usize)> {
    let (op, operands) = line.split_once(char::is_whitespace)?;
    let mut parts = op.strip_prefix("ld.param.")?.split('.');
    let mut ty = parts.next()?;
    let mut lanes = 1;
    if let Some(v) = ty.strip_prefix('v') {
        lanes = v.parse().ok()?;
        ty = parts.next()?;
    }
    let bits: usize = ty
        .strip_prefix(['b', 'u', 's'])
        .and_then(|w| w.parse().ok())?;
    let address = operands.rsplit_once('[')?.1.split_once(']')?.0;
    let (param, offset) = match address.split_once('+') {
        Some((param, offset)) => (param, offset.trim().parse().ok()?),
        None => (address, 0),
    };
    Some((lanes, bits / 8, param.trim(), offset))
}

fn describe(fields: &[Field]) -> String {
    let fields: Vec<String> = fields
        .iter()
        .map(|f| format!("{}@{}:{}", f.name, f.offset, f.bytes))
        .collect();
    fields.join(" ")
}

/// What is wrong with entry `name` of the PTX given the layout of its arguments.
fn check_entry(name: &str, entry: &PtxEntry, layout: &ArgsLayout, problems: &mut Vec<String>) {
    let param = format!("{name}_param_0");
    let [decl] = &entry.params[..] else {
        problems.push(format!(
            "{name}: {} parameters in the PTX ({:?}); the ABI is one argument struct",
            entry.params.len(),
            entry.params
        ));
        return;
    };
    match byval_param(decl) {
        Some((align, p, size)) if p == param => {
            if (align, size) != (layout.align, layout.size) {
                problems.push(format!(
                    "{name}: PTX parameter `.align {align} .b8 [{size}]`, but the argument struct \
                     has align {} and size {} ({}): rebuild the PTX (scripts/build-ptx)",
                    layout.align,
                    layout.size,
                    describe(layout.fields)
                ));
            }
        }
        _ => problems.push(format!("{name}: not a byval struct parameter: `{decl}`")),
    }
    for line in &entry.body {
        if !line.contains(&param) {
            continue;
        }
        let Some((lanes, bytes, p, offset)) = param_load(line) else {
            problems.push(format!(
                "{name}: the parameter used other than by ld.param: `{line}`"
            ));
            continue;
        };
        if p != param {
            problems.push(format!("{name}: `{line}` reads another parameter"));
            continue;
        }
        for lane in 0..lanes {
            let at = offset + lane * bytes;
            let field = layout.fields.iter().find(|f| f.offset == at);
            if !matches!(field, Some(f) if f.bytes == bytes) {
                problems.push(format!(
                    "{name}: `{line}` loads {bytes} bytes at offset {at}, which is no field of \
                     the argument struct ({}): rebuild the PTX (scripts/build-ptx)",
                    describe(layout.fields)
                ));
            }
        }
    }
}

/// The argument structs themselves: flat (every field 1, 2, 4 or 8 bytes, one `ld.param`),
/// fields in order without overlap, inside the struct.
fn check_layout(name: &str, layout: &ArgsLayout, problems: &mut Vec<String>) {
    let mut end = 0;
    for f in layout.fields {
        if ![1, 2, 4, 8].contains(&f.bytes) || f.offset % f.bytes != 0 {
            problems.push(format!(
                "{name}: field {} is not one scalar or pointer",
                f.name
            ));
        }
        if f.offset < end {
            problems.push(format!("{name}: field {} overlaps the one before", f.name));
        }
        end = f.offset + f.bytes;
    }
    if end > layout.size || layout.fields.is_empty() {
        problems.push(format!("{name}: fields {}", describe(layout.fields)));
    }
}

#[test]
fn committed_ptx_matches_the_kernel_argument_structs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels.ptx");
    let ptx = std::fs::read_to_string(path).expect("read kernels-ptx/kernels.ptx");
    let ptx_entries = parse_entries(&ptx);
    assert!(!ptx_entries.is_empty(), "no entries in {path}");

    let mut host = BTreeMap::new();
    for entry in HOST_ENTRIES.iter().flat_map(|family| family.iter()) {
        assert!(
            host.insert(entry.name, entry).is_none(),
            "{} twice in the host tables",
            entry.name
        );
    }

    let mut problems = Vec::new();
    for name in ptx_entries.keys() {
        if !host.contains_key(name.as_str()) {
            problems.push(format!("{name}: in the PTX, in no host table"));
        }
    }
    for (name, entry) in &host {
        check_layout(name, &entry.args, &mut problems);
        match ptx_entries.get(*name) {
            Some(ptx_entry) => check_entry(name, ptx_entry, &entry.args, &mut problems),
            None => problems.push(format!("{name}: in a host table, not in the PTX")),
        }
    }

    if !problems.is_empty() {
        let mut report = format!(
            "{} ABI problems in kernels-ptx/kernels.ptx ({} entries):\n",
            problems.len(),
            ptx_entries.len()
        );
        for p in problems.iter().take(12) {
            writeln!(report, "  {p}").unwrap();
        }
        if problems.len() > 12 {
            writeln!(report, "  ... and {} more", problems.len() - 12).unwrap();
        }
        panic!("{report}");
    }
}

#[test]
fn the_parsers_read_what_rustc_emits() {
    assert_eq!(
        byval_param(".param .align 8 .b8 ferrax_x_param_0[56]"),
        Some((8, "ferrax_x_param_0", 56))
    );
    assert_eq!(
        param_load("ld.param.b32 \t%r1, [ferrax_x_param_0+36];"),
        Some((1, 4, "ferrax_x_param_0", 36))
    );
    assert_eq!(
        param_load("ld.param.u64 \t%rd7, [ferrax_x_param_0];"),
        Some((1, 8, "ferrax_x_param_0", 0))
    );
    assert_eq!(
        param_load("ld.param.v2.b32 \t{%r1, %r2}, [ferrax_x_param_0+32];"),
        Some((2, 4, "ferrax_x_param_0", 32))
    );
    assert_eq!(param_load("mov.b64 \t%rd1, ferrax_x_param_0;"), None);
}
