//! Closed sets of label values: enums whose variants each carry the one string the wire uses
//! for them (a metric's label value, a JSON key or value, a CLI word). Code compares the enum,
//! never the string, so a typo does not compile; the string is written once, here.

/// A value that shows as a fixed label on the wire.
pub trait Label {
    fn label(&self) -> &'static str;
}

/// Strings that are labels already (GPM's pipes and the link directions, which stay strings).
impl Label for &'static str {
    fn label(&self) -> &'static str {
        self
    }
}

/// Declares an enum of label values: `label()`, `from_label()`, `ALL` in declaration order,
/// `Display` and `Serialize` as the label, and an order by label (so maps keyed by it list
/// their entries as they did when the keys were strings).
macro_rules! label_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident => $label:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        // As visible as the enum: each enum's set, whichever of them its users need.
        #[allow(unreachable_pub, dead_code)]
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn label(self) -> &'static str {
                match self {
                    $( $name::$variant => $label, )+
                }
            }

            pub fn from_label(label: &str) -> Option<$name> {
                match label {
                    $( $label => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl $crate::model::label::Label for $name {
            fn label(&self) -> &'static str {
                $name::label(*self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.label())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.label())
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $name {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.label().cmp(other.label())
            }
        }
    };
}

pub(crate) use label_enum;

#[cfg(test)]
mod tests {
    label_enum! {
        /// A test set.
        enum Colour {
            Red => "red",
            DeepBlue => "deep_blue",
        }
    }

    #[test]
    fn a_label_enum_round_trips_and_orders_by_label() {
        for colour in Colour::ALL {
            assert_eq!(Colour::from_label(colour.label()), Some(*colour));
        }
        assert_eq!(Colour::from_label("Red"), None);
        assert_eq!(serde_json::to_string(&Colour::DeepBlue).unwrap(), "\"deep_blue\"");
        assert_eq!(Colour::Red.to_string(), "red");
        // By label, not by declaration: "deep_blue" < "red".
        assert!(Colour::DeepBlue < Colour::Red);
    }
}
