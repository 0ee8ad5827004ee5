//! Checks the `#[repr(C)]` mirror in `ferrax::ffi::sys` against the real `xla/ffi/api/c_api.h`
//! shipped with the installed jaxlib: a C program generated from the lists below prints what the
//! C compiler says (sizes, alignments, offsets, `*_STRUCT_SIZE`, enum values) and every number
//! is compared with the Rust side. A wrong offset here would be silent memory corruption at run
//! time, so the check is done by the compiler rather than by hand-copied numbers.

use ferrax::ffi::sys;
use ferrax::ffi::{DataType, ErrorCode};
use std::fmt;
use std::io::Write;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// One number known to both sides: `c_expr` is evaluated by the C compiler with the header.
struct Expect {
    rust_expr: String,
    c_expr: String,
    rust: i64,
}

#[derive(Debug)]
struct Mismatch {
    rust_expr: String,
    c_expr: String,
    rust: i64,
    c: i64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Mismatch {
            rust_expr,
            c_expr,
            rust,
            c,
        } = self;
        write!(f, "C {c_expr} = {c}, but Rust {rust_expr} = {rust}")
    }
}

#[derive(Default)]
struct Spec {
    expects: Vec<Expect>,
    /// Names of the `sys` items the expectations cover, for the completeness check.
    covered: Vec<&'static str>,
}

impl Spec {
    fn push(&mut self, rust_expr: String, c_expr: String, rust: usize) {
        let rust = i64::try_from(rust).unwrap();
        self.expects.push(Expect {
            rust_expr,
            c_expr,
            rust,
        });
    }
}

fn field_size<S, T>(_: fn(&S) -> &T) -> usize {
    size_of::<T>()
}

/// Name of a field in C: the same as in Rust unless given with `rust_name as c_name`.
macro_rules! c_field {
    ($f:ident) => {
        stringify!($f)
    };
    ($f:ident $c:ident) => {
        stringify!($c)
    };
}

/// `Struct [Rust STRUCT_SIZE const] { field, rust_field as c_field, field since 4, .. }`, checked
/// against a header of API 0.`$minor`. The `[..]` part is given for the structs whose
/// `*_STRUCT_SIZE` sys.rs defines (the header defines it for more). A field `since` a newer
/// minor than the header's is absent there: the struct then ends before it, so its size there
/// is the end of its last field that is present.
macro_rules! structs {
    ($spec:ident, $minor:ident; $($s:ident $([$size:ident])? {
        $($f:ident $(as $cf:ident)? $(since $since:literal)?),* $(,)?
    })*) => {$(
        // Exhaustive pattern, so a field added to sys.rs but not listed here does not compile
        // (inside a macro rustc words it as "pattern requires `..`"; the fix is to list the field).
        let _ = |v: &sys::$s| {
            let sys::$s { $($f: _),* } = v;
        };
        let s = stringify!($s);
        $spec.covered.push(s);
        let mut present_end = 0;
        let mut complete = true;
        $(
            let since: i32 = 0 $(+ $since)?;
            if $minor >= since {
                let (f, cf) = (stringify!($f), c_field!($f $($cf)?));
                let (offset, size) = (offset_of!(sys::$s, $f), field_size(|v: &sys::$s| &v.$f));
                $spec.push(format!("offset_of!({s}, {f})"), format!("offsetof({s}, {cf})"), offset);
                $spec.push(format!("size of {s}.{f}"), format!("sizeof((({s} *)0)->{cf})"), size);
                present_end = present_end.max(offset + size);
            } else {
                complete = false;
            }
        )*
        let _ = present_end; // read only by structs with a STRUCT_SIZE
        $spec.push(format!("align_of::<{s}>()"), format!("_Alignof({s})"), align_of::<sys::$s>());
        if complete {
            $spec.push(format!("size_of::<{s}>()"), format!("sizeof({s})"), size_of::<sys::$s>());
        }
        $(
            $spec.covered.push(stringify!($size));
            let (name, rust) = if complete {
                (stringify!($size).to_string(), sys::$size)
            } else {
                (format!("end of {s}'s fields in API 0.{}", $minor), present_end)
            };
            $spec.push(name, stringify!($size).into(), rust);
        )?
    )*};
}

/// Integer constants with the same name on both sides; one `since` a newer minor than the
/// header's is not looked for there.
macro_rules! consts {
    ($spec:ident, $minor:ident; $($c:ident $(since $since:literal)?),* $(,)?) => {$(
        $spec.covered.push(stringify!($c));
        let since: i32 = 0 $(+ $since)?;
        if $minor >= since {
            $spec.push(stringify!($c).into(), stringify!($c).into(), usize::try_from(sys::$c).unwrap());
        }
    )*};
}

/// The names a header older than 0.4 has for what 0.4 renamed (the layout did not change).
fn legacy_names(c_expr: &str, minor: i32) -> String {
    let renames = [
        ("XLA_FFI_InternalExtension", "XLA_FFI_Extension_Base"),
        ("XLA_FFI_Error_GetDetails", "XLA_FFI_Error_GetMessage"),
        ("XLA_FFI_InvokeContext_Get", "XLA_FFI_ExecutionContext_Get"),
    ];
    let mut expr = c_expr.to_string();
    if minor < 4 {
        for (new, old) in renames {
            expr = expr.replace(new, old);
        }
    }
    expr
}

/// Everything sys.rs claims about a header of API 0.`minor`.
fn spec(minor: i32) -> Spec {
    let mut spec = Spec::default();
    structs! { spec, minor;
        XLA_FFI_InternalExtension [XLA_FFI_InternalExtension_STRUCT_SIZE] {
            struct_size, type_ as type, next,
        }
        XLA_FFI_Api_Version [XLA_FFI_Api_Version_STRUCT_SIZE] {
            struct_size, extension_start, major_version, minor_version,
        }
        XLA_FFI_Error_Create_Args [XLA_FFI_Error_Create_Args_STRUCT_SIZE] {
            struct_size, extension_start, message, errc,
        }
        XLA_FFI_Error_GetDetails_Args [XLA_FFI_Error_GetDetails_Args_STRUCT_SIZE] {
            struct_size, extension_start, error, message, errc since 4,
        }
        XLA_FFI_Error_Destroy_Args [XLA_FFI_Error_Destroy_Args_STRUCT_SIZE] {
            struct_size, extension_start, error,
        }
        XLA_FFI_Buffer [XLA_FFI_Buffer_STRUCT_SIZE] {
            struct_size, extension_start, dtype, data, rank, dims,
        }
        XLA_FFI_ByteSpan { ptr, len }
        XLA_FFI_Scalar { dtype, value }
        XLA_FFI_Array { dtype, size, data }
        XLA_FFI_TypeId { type_id }
        XLA_FFI_Args [XLA_FFI_Args_STRUCT_SIZE] { struct_size, extension_start, size, types, args }
        XLA_FFI_Rets [XLA_FFI_Rets_STRUCT_SIZE] { struct_size, extension_start, size, types, rets }
        XLA_FFI_Attrs [XLA_FFI_Attrs_STRUCT_SIZE] {
            struct_size, extension_start, size, types, names, attrs,
        }
        XLA_FFI_CallFrame [XLA_FFI_CallFrame_STRUCT_SIZE] {
            struct_size, extension_start, api, ctx, stage, args, rets, attrs, future,
        }
        XLA_FFI_Stream_Get_Args [XLA_FFI_Stream_Get_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, stream,
        }
        XLA_FFI_DeviceMemory_Allocate_Args [XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, size, alignment, data,
        }
        XLA_FFI_DeviceMemory_Free_Args [XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, size, data,
        }
        XLA_FFI_ThreadPool_Schedule_Args [XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, task, data,
        }
        XLA_FFI_ThreadPool_NumThreads_Args [XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, num_threads,
        }
        XLA_FFI_RunId_Get_Args [XLA_FFI_RunId_Get_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, run_id,
        }
        XLA_FFI_DeviceOrdinal_Get_Args [XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE] {
            struct_size, extension_start, ctx, device_ordinal,
        }
        XLA_FFI_Metadata [XLA_FFI_Metadata_STRUCT_SIZE] {
            struct_size, api_version, traits, state_type_id,
        }
        XLA_FFI_Metadata_Extension [XLA_FFI_Metadata_Extension_STRUCT_SIZE] {
            extension_base, metadata,
        }
        XLA_FFI_Api [XLA_FFI_Api_STRUCT_SIZE] {
            struct_size,
            extension_start,
            api_version,
            internal_api,
            XLA_FFI_Error_Create,
            XLA_FFI_Error_GetDetails,
            XLA_FFI_Error_Destroy,
            XLA_FFI_Handler_Register,
            XLA_FFI_Stream_Get,
            XLA_FFI_Type_Register,
            XLA_FFI_InvokeContext_Get,
            XLA_FFI_State_Set,
            XLA_FFI_State_Get,
            XLA_FFI_DeviceMemory_Allocate,
            XLA_FFI_DeviceMemory_Free,
            XLA_FFI_ThreadPool_Schedule,
            XLA_FFI_ThreadPool_NumThreads,
            XLA_FFI_Future_Create,
            XLA_FFI_Future_SetAvailable,
            XLA_FFI_Future_SetError,
            XLA_FFI_RunId_Get,
            XLA_FFI_DeviceOrdinal_Get,
            XLA_FFI_InvokeContext_FindExtension since 4,
            XLA_FFI_CustomOptions_Get since 5,
        }
    }
    // Incomplete types in C: only ever handled through pointers, so they have no layout.
    spec.covered.extend([
        "XLA_FFI_Error",
        "XLA_FFI_InvokeContext",
        "XLA_FFI_Future",
        "XLA_FFI_InternalApi",
    ]);
    // The header's own minor version is what selects this spec (see `checked_headers`).
    spec.covered
        .extend(["XLA_FFI_API_MINOR", "XLA_FFI_API_MINOR_OLDEST"]);
    consts! { spec, minor;
        XLA_FFI_API_MAJOR,
        XLA_FFI_Extension_Metadata,
        XLA_FFI_ArgType_BUFFER,
        XLA_FFI_RetType_BUFFER,
        XLA_FFI_AttrType_ARRAY,
        XLA_FFI_AttrType_DICTIONARY,
        XLA_FFI_AttrType_SCALAR,
        XLA_FFI_AttrType_STRING,
        XLA_FFI_ExecutionStage_INSTANTIATE,
        XLA_FFI_ExecutionStage_PREPARE,
        XLA_FFI_ExecutionStage_INITIALIZE,
        XLA_FFI_ExecutionStage_EXECUTE,
        XLA_FFI_ExecutionStage_RECORD since 4,
        XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE,
    }
    use DataType::*;
    let dtypes = [
        (Pred, "PRED"),
        (S8, "S8"),
        (S16, "S16"),
        (S32, "S32"),
        (S64, "S64"),
        (U8, "U8"),
        (U16, "U16"),
        (U32, "U32"),
        (U64, "U64"),
        (F16, "F16"),
        (BF16, "BF16"),
        (F32, "F32"),
        (F64, "F64"),
        (C64, "C64"),
        (C128, "C128"),
        (Token, "TOKEN"),
    ];
    for (dtype, c) in dtypes {
        let raw = usize::try_from(dtype.to_raw()).unwrap();
        spec.push(
            format!("{dtype:?}.to_raw()"),
            format!("XLA_FFI_DataType_{c}"),
            raw,
        );
    }
    // Handlers report these codes to XLA as `XLA_FFI_Error_Code`.
    let codes = [
        (ErrorCode::InvalidArgument, "INVALID_ARGUMENT"),
        (ErrorCode::ResourceExhausted, "RESOURCE_EXHAUSTED"),
        (ErrorCode::FailedPrecondition, "FAILED_PRECONDITION"),
        (ErrorCode::Unimplemented, "UNIMPLEMENTED"),
        (ErrorCode::Internal, "INTERNAL"),
    ];
    for (code, c) in codes {
        let raw = usize::try_from(code as i32).unwrap();
        spec.push(
            format!("ErrorCode::{code:?}"),
            format!("XLA_FFI_Error_Code_{c}"),
            raw,
        );
    }
    for expect in &mut spec.expects {
        expect.c_expr = legacy_names(&expect.c_expr, minor);
    }
    spec
}

/// `pub struct` and `pub const` items of sys.rs that the spec does not cover, so that a new
/// binding cannot go unchecked.
fn uncovered(covered: &[&str]) -> Vec<String> {
    include_str!("../src/ffi/sys.rs")
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub struct ")
                .or_else(|| l.strip_prefix("pub const "))
        })
        .map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap()
        })
        .filter(|name| !covered.contains(name))
        .map(String::from)
        .collect()
}

/// A directory holding `xla/ffi/api/c_api.h`, and the header's `XLA_FFI_API_MINOR`.
struct Header {
    include: PathBuf,
    minor: i32,
}

fn header_minor(include: &Path) -> i32 {
    let path = include.join("xla/ffi/api/c_api.h");
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("#define XLA_FFI_API_MINOR "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{} defines no XLA_FFI_API_MINOR", path.display()))
}

/// Every distinct `c_api.h` to check, oldest first: the directories in `FERRAX_XLA_FFI_INCLUDE`
/// (`:`-separated), those `scripts/xla-ffi-headers` put under `target/xla-ffi-headers/` (one
/// per supported jaxlib), and the installed jaxlibs' (`FERRAX_PYTHON`, `.venvs/*`, `python3`).
/// In CI every API version from `XLA_FFI_API_MINOR_OLDEST` to `XLA_FFI_API_MINOR` must be
/// among them; elsewhere a missing one is said and skipped.
fn headers() -> &'static [Header] {
    static HEADERS: OnceLock<Vec<Header>> = OnceLock::new();
    HEADERS.get_or_init(|| {
        let has_header = |dir: &Path| dir.join("xla/ffi/api/c_api.h").is_file();
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(list) = std::env::var_os("FERRAX_XLA_FFI_INCLUDE") {
            for dir in std::env::split_paths(&list) {
                assert!(
                    has_header(&dir),
                    "FERRAX_XLA_FFI_INCLUDE: {dir:?} has no xla/ffi/api/c_api.h"
                );
                dirs.push(dir);
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        if let Ok(entries) = std::fs::read_dir(root.join("target/xla-ffi-headers")) {
            let mut found: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            found.sort();
            dirs.extend(found.into_iter().filter(|dir| has_header(dir)));
        }
        let mut venvs: Vec<std::ffi::OsString> = std::fs::read_dir(root.join(".venvs"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path().join("bin/python").into())
                    .collect()
            })
            .unwrap_or_default();
        venvs.sort();
        let pythons = std::env::var_os("FERRAX_PYTHON")
            .into_iter()
            .chain(venvs)
            .chain(["python3".into()]);
        dirs.extend(
            pythons
                .filter_map(|python| {
                    let out = Command::new(python)
                        .args(["-c", "import jax.ffi; print(jax.ffi.include_dir())"])
                        .output()
                        .ok()?;
                    out.status
                        .success()
                        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
                })
                .filter(|dir| has_header(dir)),
        );
        // The same header reached twice (a venv's jaxlib and its copy) is checked once.
        let mut texts = Vec::new();
        let mut headers = Vec::new();
        for include in dirs {
            let text = std::fs::read(include.join("xla/ffi/api/c_api.h")).unwrap();
            if !texts.contains(&text) {
                texts.push(text);
                headers.push(Header {
                    minor: header_minor(&include),
                    include,
                });
            }
        }
        headers.sort_by_key(|h| h.minor);
        let missing: Vec<i32> = (sys::XLA_FFI_API_MINOR_OLDEST..=sys::XLA_FFI_API_MINOR)
            .filter(|minor| !headers.iter().any(|h| h.minor == *minor))
            .collect();
        if !missing.is_empty() {
            let why =
                format!(
                "no c_api.h of API {}: run scripts/xla-ffi-headers, or set FERRAX_XLA_FFI_INCLUDE",
                missing.iter().map(|m| format!("0.{m}")).collect::<Vec<_>>().join(", ")
            );
            assert!(std::env::var_os("CI").is_none(), "{why}");
            // Straight to stderr: the test harness would capture `eprintln!` of a passing test.
            let _ = writeln!(std::io::stderr(), "\n*** c_layout: {why} ***\n");
        }
        headers
    })
}

/// Compiles and runs a C program that prints every `c_expr`, and returns the expectations whose
/// Rust value differs. `name` keeps concurrent tests' programs apart.
fn mismatches(include: &Path, name: &str, expects: &[Expect]) -> Vec<Mismatch> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("c_layout")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut program = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    program += "#include \"xla/ffi/api/c_api.h\"\n\nint main(void) {\n";
    for e in expects {
        program += &format!("  printf(\"%lld\\n\", (long long)({}));\n", e.c_expr);
    }
    program += "  return 0;\n}\n";
    let (source, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&source, program).unwrap();

    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-I"])
        .arg(include)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cannot run cc");
    assert!(
        cc.status.success(),
        "cc failed on {} (a name in the spec is missing from the header?):\n{}",
        source.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{} failed", exe.display());

    let values: Vec<i64> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(
        values.len(),
        expects.len(),
        "{} printed the wrong number of values",
        exe.display()
    );
    expects
        .iter()
        .zip(values)
        .filter(|(e, c)| e.rust != *c)
        .map(|(e, c)| Mismatch {
            rust_expr: e.rust_expr.clone(),
            c_expr: e.c_expr.clone(),
            rust: e.rust,
            c,
        })
        .collect()
}

#[test]
fn sys_matches_every_c_api_header() {
    let missing = uncovered(&spec(sys::XLA_FFI_API_MINOR).covered);
    assert!(
        missing.is_empty(),
        "sys.rs items not in tests/c_layout.rs: {missing:?}"
    );
    let mut reports = Vec::new();
    for header in headers() {
        let path = header.include.join("xla/ffi/api/c_api.h");
        if header.minor > sys::XLA_FFI_API_MINOR {
            // It still works at run time (the handshake reports 0.5); the mirror lags behind.
            reports.push(format!(
                "{} is API 0.{}, newer than src/ffi/sys.rs (0.{}): extend the mirror",
                path.display(),
                header.minor,
                sys::XLA_FFI_API_MINOR
            ));
            continue;
        }
        let spec = spec(header.minor);
        let found = mismatches(
            &header.include,
            &format!("sys-0.{}", header.minor),
            &spec.expects,
        );
        if !found.is_empty() {
            let lines: Vec<String> = found.iter().map(ToString::to_string).collect();
            reports.push(format!(
                "{} of {} values differ between src/ffi/sys.rs and {} (API 0.{}):\n  {}",
                found.len(),
                spec.expects.len(),
                path.display(),
                header.minor,
                lines.join("\n  ")
            ));
        }
    }
    assert!(reports.is_empty(), "{}", reports.join("\n"));
}

/// The check must be able to fail: of a right and a wrong claim (dims at 48 instead of 40 on
/// 64-bit targets), exactly the wrong one is reported, with both values.
#[test]
fn wrong_expectation_is_reported() {
    let Some(Header { include, .. }) = headers().first() else {
        return;
    };
    let dims = offset_of!(sys::XLA_FFI_Buffer, dims);
    let mut spec = Spec::default();
    spec.push(
        "right".into(),
        "offsetof(XLA_FFI_Buffer, dims)".into(),
        dims,
    );
    spec.push(
        "wrong".into(),
        "offsetof(XLA_FFI_Buffer, dims)".into(),
        dims + 8,
    );

    let found = mismatches(include, "wrong", &spec.expects);
    assert_eq!(
        found.len(),
        1,
        "expected exactly the wrong offset to be reported: {found:?}"
    );
    assert_eq!(found[0].rust_expr, "wrong");
    assert_eq!((found[0].c, found[0].rust), (dims as i64, dims as i64 + 8));
}
