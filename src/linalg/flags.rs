//! LAPACK's character arguments as enums: jaxlib passes them as u8 ASCII attributes, the C ABI
//! as `char`; both decode them here, so the cores only see valid values.

use std::ffi::c_char;

/// A LAPACK character argument.
pub trait Flag: Copy + Sized + 'static {
    /// The letters LAPACK accepts for it, in the order the enum lists them.
    const LETTERS: &'static [u8];
    fn from_letter(letter: u8) -> Option<Self>;
    /// The letter as LAPACK takes it.
    fn letter(self) -> c_char;

    /// What a bad value was expected to be: "one of 'L', 'U'".
    fn expected() -> String {
        let letters: Vec<String> = Self::LETTERS
            .iter()
            .map(|&c| format!("'{}'", c as char))
            .collect();
        format!("one of {}", letters.join(", "))
    }
}

macro_rules! flags {
    ($($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $letter:literal),* $(,)? })*) => {$(
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant),*
        }

        impl Flag for $name {
            const LETTERS: &'static [u8] = &[$($letter),*];
            fn from_letter(letter: u8) -> Option<Self> {
                match letter {
                    $($letter => Some($name::$variant),)*
                    _ => None,
                }
            }
            fn letter(self) -> c_char {
                (match self {
                    $($name::$variant => $letter,)*
                }) as c_char
            }
        }
    )*};
}

flags! {
    /// The triangle of a matrix that is read or written (`uplo`).
    Uplo { Lower = b'L', Upper = b'U' }
    /// The side a matrix multiplies from (`side`).
    Side { Left = b'L', Right = b'R' }
    /// `op(A)` (`trans`): A, Aᵀ or Aᴴ.
    Trans { No = b'N', Transpose = b'T', Conjugate = b'C' }
    /// Whether a triangular matrix has an implicit unit diagonal (`diag`).
    Diag { NonUnit = b'N', Unit = b'U' }
    /// Whether eigenvectors or Schur vectors are computed (`jobz`, `jobvl`, `jobvs`, ...).
    Vectors { Compute = b'V', Skip = b'N' }
    /// Whether `?gees` sorts the eigenvalues (`sort`).
    Sort { No = b'N', Yes = b'S' }
    /// Which singular vectors an SVD computes (`jobz`, or `jobu` = `jobvt`).
    SvdJob {
        /// All of U and Vᴴ.
        All = b'A',
        /// Their first min(m, n) columns / rows.
        Some = b'S',
        /// Singular values only.
        None = b'N',
        /// Written over the input.
        Overwrite = b'O',
    }
}

impl Uplo {
    pub fn is_lower(self) -> bool {
        self == Uplo::Lower
    }
}

impl Vectors {
    pub fn computed(self) -> bool {
        self == Vectors::Compute
    }
}
