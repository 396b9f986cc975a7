//! The wire names of the action's enums, written once per enum: [`wire_names!`] derives from one
//! table the canonical spelling (`as_str`), the exact reading (`from_wire`), the list of every
//! variant (`ALL`), the serde form and, when asked, the rejection text (`EXPECTED`).

/// Implements, for a field-less enum, from the table `Variant => "name"` (in declaration order):
///
/// - `ALL`: every variant in the table's order, and `NAMES`: their spellings;
/// - `as_str`: the spelling; `from_wire`: the variant of exactly that spelling (no trimming, no
///   case folding: what the store and the wire carry);
/// - `Serialize` as the spelling and `Deserialize` of exactly a spelling: another string is
///   refused with serde's `unknown variant` error, as a derived enum refuses it; a value that is
///   not a string (which a derived enum would read as its map form) is refused as such;
/// - with `expected = "prefix"`, `EXPECTED`: the prefix followed by the spellings joined by `|`.
///
/// Every function is a `match` or a scan of at most a dozen entries, and none allocates. Paths
/// inside are absolute (`::serde`, `::core`), so the macro works in any module.
macro_rules! wire_names {
    ($type:ident, expected = $prefix:literal {
        $first:ident => $first_name:literal $(, $variant:ident => $name:literal)* $(,)?
    }) => {
        impl $type {
            /// The message of the rejection for a value that names no variant.
            pub const EXPECTED: &'static str = concat!($prefix, $first_name $(, "|", $name)*);
        }

        $crate::hook::wire::wire_names!($type { $first => $first_name $(, $variant => $name)* });
    };
    ($type:ident {
        $first:ident => $first_name:literal $(, $variant:ident => $name:literal)* $(,)?
    }) => {
        impl $type {
            /// The spellings of [`Self::ALL`], in its order.
            pub const NAMES: &'static [&'static str] = &[$first_name $(, $name)*];

            /// Every variant, in declaration order.
            pub const ALL: [$type; [$first_name $(, $name)*].len()] =
                [$type::$first $(, $type::$variant)*];

            /// The canonical wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $type::$first => $first_name,
                    $($type::$variant => $name,)*
                }
            }

            /// The variant spelt exactly `text` on the wire (no trimming, no case folding).
            pub fn from_wire(text: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|variant| variant.as_str() == text)
            }
        }

        impl ::serde::Serialize for $type {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $type {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;

                impl ::serde::de::Visitor<'_> for Visitor {
                    type Value = $type;

                    fn expecting(
                        &self,
                        f: &mut ::core::fmt::Formatter<'_>,
                    ) -> ::core::fmt::Result {
                        f.write_str("one of ")?;
                        for (i, name) in $type::NAMES.iter().enumerate() {
                            if i > 0 {
                                f.write_str(", ")?;
                            }
                            f.write_str(name)?;
                        }
                        Ok(())
                    }

                    fn visit_str<E: ::serde::de::Error>(self, text: &str) -> Result<$type, E> {
                        $type::from_wire(text)
                            .ok_or_else(|| E::unknown_variant(text, $type::NAMES))
                    }
                }

                deserializer.deserialize_str(Visitor)
            }
        }
    };
}

pub(crate) use wire_names;

#[cfg(test)]
mod tests {
    use crate::hook::envelope::ContentSource;
    use crate::hook::{Channel, SessionMode, Thinking, WakeMode};

    /// The serde form is the spelling, and reads back as the variant, for every variant.
    fn round_trips<T>(all: &[T], as_str: fn(T) -> &'static str)
    where
        T: Copy + PartialEq + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
    {
        for &variant in all {
            let json = serde_json::to_value(variant).unwrap();
            assert_eq!(json, serde_json::Value::from(as_str(variant)));
            assert_eq!(serde_json::from_value::<T>(json).unwrap(), variant);
        }
    }

    #[test]
    fn every_enum_round_trips_through_its_one_spelling() {
        round_trips(&Channel::ALL, Channel::as_str);
        round_trips(&Thinking::ALL, Thinking::as_str);
        round_trips(&SessionMode::ALL, SessionMode::as_str);
        round_trips(&WakeMode::ALL, WakeMode::as_str);
        round_trips(&ContentSource::ALL, ContentSource::as_str);
    }

    #[test]
    fn the_expected_texts_list_every_spelling() {
        assert_eq!(
            Channel::EXPECTED,
            "channel must be last|whatsapp|telegram|discord|slack|mattermost|signal|imessage|msteams"
        );
        assert_eq!(
            Thinking::EXPECTED,
            "thinking must be off|minimal|low|medium|high|xhigh|max|adaptive"
        );
    }

    #[test]
    fn the_serde_form_is_exact_as_the_derived_one_was() {
        let refused = serde_json::from_str::<Channel>("\"Telegram\"").unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("unknown variant `Telegram`")
        );
        assert!(serde_json::from_str::<WakeMode>("\"next-heartbeat\"").is_ok());
        assert!(serde_json::from_str::<SessionMode>("\"Persistent\"").is_err());
    }
}
