//! Stack specifications: presets, property sets and explicit layer lists, validated against what
//! each layer provides and requires (thesis Table 2.4 and §2.1.9; STYLE principle 12).

use crate::layer::Service;
use crate::layers::LayerKind;
use crate::StackSpecError;
use core::fmt;
use std::sync::Arc;

/// A property an application can ask of its stack (Ensemble's property names, thesis Table 2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Property {
    /// Fragmentation and reassembly of messages larger than a datagram.
    Frag,
    /// Flow control of casts and sends, with back-pressure to the application.
    Flow,
    /// A sender delivers its own casts.
    Local,
    /// Group membership: views change on failures and leaves.
    Gmp,
    /// View synchronization: the flush that gives virtual synchrony.
    Sync,
    /// Failure detection by heartbeats.
    Suspect,
    /// Suspicion sharing.
    Slander,
    /// Partition healing: discovery and merging of partitions (and of new members).
    Heal,
    /// Primary-partition views: a view is primary when it holds a majority of the primary view
    /// it follows.
    Primary,
    /// Total order of application casts (a sequencer; membership traffic is exempt).
    Total,
    /// Causal order of application casts (vector timestamps; membership traffic is exempt).
    Causal,
    /// Safe (agreed) delivery: a cast is delivered once every member of the view holds it.
    Agree,
    /// Protocol switching: the group may change its stack at a view change.
    Switch,
    /// Endpoint migration: a member may move to another address at a view change.
    Migrate,
    /// State transfer: a merged view copies the application's state from rank 0 to the others.
    Xfer,
    /// Total order of application casts by a rotating token (the alternative to `Total`'s
    /// sequencer; membership traffic is exempt).
    Token,
}

impl Property {
    /// Every property.
    pub const ALL: &'static [Property] = &[
        Property::Frag,
        Property::Flow,
        Property::Local,
        Property::Gmp,
        Property::Sync,
        Property::Suspect,
        Property::Slander,
        Property::Heal,
        Property::Primary,
        Property::Total,
        Property::Causal,
        Property::Agree,
        Property::Switch,
        Property::Migrate,
        Property::Xfer,
        Property::Token,
    ];

    /// The property's name.
    pub fn name(self) -> &'static str {
        match self {
            Property::Frag => "Frag",
            Property::Flow => "Flow",
            Property::Local => "Local",
            Property::Gmp => "Gmp",
            Property::Sync => "Sync",
            Property::Suspect => "Suspect",
            Property::Slander => "Slander",
            Property::Heal => "Heal",
            Property::Primary => "Primary",
            Property::Total => "Total",
            Property::Causal => "Causal",
            Property::Agree => "Agree",
            Property::Switch => "Switch",
            Property::Migrate => "Migrate",
            Property::Xfer => "Xfer",
            Property::Token => "Token",
        }
    }

    /// The layers this property adds, and why.
    fn layers(self) -> &'static [LayerKind] {
        match self {
            Property::Frag => &[LayerKind::Frag],
            Property::Flow => &[LayerKind::Pt2ptw, LayerKind::Mflow],
            Property::Local => &[LayerKind::Local],
            Property::Gmp => &[LayerKind::Intra, LayerKind::Leave, LayerKind::Elect],
            Property::Sync => &[LayerKind::Sync],
            Property::Suspect => &[LayerKind::Suspect],
            Property::Slander => &[LayerKind::Slander],
            Property::Heal => &[LayerKind::Heal, LayerKind::Inter, LayerKind::Merge],
            Property::Primary => &[LayerKind::Primary],
            Property::Total => &[LayerKind::Sequencer, LayerKind::Local],
            Property::Causal => &[LayerKind::Causal, LayerKind::Local],
            Property::Agree => &[LayerKind::Safe, LayerKind::Local],
            Property::Switch => &[LayerKind::Switch],
            Property::Migrate => &[LayerKind::Migrate],
            Property::Xfer => &[LayerKind::Xfer],
            Property::Token => &[LayerKind::Totem, LayerKind::Local],
        }
    }
}

/// Named property sets.
pub const PRESETS: &[(&str, &[Property], &str)] = &[
    (
        "fifo",
        &[Property::Frag, Property::Flow, Property::Local],
        "reliable FIFO multicast and point-to-point with fragmentation and flow control over a static view",
    ),
    (
        "vsync",
        &[
            Property::Gmp,
            Property::Sync,
            Property::Heal,
            Property::Suspect,
            Property::Slander,
            Property::Frag,
            Property::Flow,
            Property::Local,
            Property::Switch,
            Property::Migrate,
        ],
        "virtually synchronous reliable FIFO multicast and point-to-point, with membership (failures, leaves, merges)",
    ),
    (
        "total",
        &[
            Property::Gmp,
            Property::Sync,
            Property::Heal,
            Property::Suspect,
            Property::Slander,
            Property::Frag,
            Property::Flow,
            Property::Local,
            Property::Switch,
            Property::Migrate,
            Property::Total,
        ],
        "vsync, and every member delivers the application's casts in the same order (a sequencer)",
    ),
    (
        "causal",
        &[
            Property::Gmp,
            Property::Sync,
            Property::Heal,
            Property::Suspect,
            Property::Slander,
            Property::Frag,
            Property::Flow,
            Property::Local,
            Property::Switch,
            Property::Migrate,
            Property::Causal,
        ],
        "vsync, and a cast is delivered only after every cast its sender had delivered (vector timestamps)",
    ),
    (
        "safe",
        &[
            Property::Gmp,
            Property::Sync,
            Property::Heal,
            Property::Suspect,
            Property::Slander,
            Property::Frag,
            Property::Flow,
            Property::Local,
            Property::Switch,
            Property::Migrate,
            Property::Agree,
        ],
        "vsync, and a cast is delivered only once every member of the view holds it (safe delivery)",
    ),
];

/// The layers every stack built from properties has, and why.
const BASE: &[(LayerKind, &str)] = &[
    (LayerKind::Top, "every stack has a top"),
    (LayerKind::Stable, "frees retransmission buffers and recovers lost tails (base)"),
    (LayerKind::Appl, "the application's proxy (base)"),
    (LayerKind::Pt2pt, "reliable FIFO point-to-point (base)"),
    (LayerKind::Mnak, "reliable FIFO multicast (base)"),
    (LayerKind::Bottom, "every stack has a bottom"),
];

/// A stack: the list of layers, top to bottom. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StackSpec {
    layers: Arc<[LayerKind]>,
}

impl StackSpec {
    /// Parses a preset (`fifo`), a property set (`Frag+Flow+Local`, also comma-separated) or an
    /// explicit layer list (`top:appl:frag:pt2ptw:mflow:pt2pt:mnak:bottom`).
    pub fn parse(text: &str) -> Result<StackSpec, StackSpecError> {
        StackSpec::parse_explained(text).map(|(spec, _)| spec)
    }

    /// Like [`StackSpec::parse`], also saying why each layer is in the stack (for
    /// `motet stack explain`).
    pub fn parse_explained(text: &str) -> Result<(StackSpec, Vec<(LayerKind, String)>), StackSpecError> {
        let text = text.trim();
        // Nothing named (an unset variable in `--stack "$STACK"`) is not the bare base stack.
        if text.split(['+', ',', ':']).all(|word| word.trim().is_empty()) {
            return Err(StackSpecError::Empty);
        }
        // A word that names both a preset and a layer (`causal`) is the preset.
        let preset = PRESETS.iter().any(|(name, _, _)| name.eq_ignore_ascii_case(text));
        if text.contains(':') || (LayerKind::from_name(text).is_some() && !preset) {
            let layers = text
                .split(':')
                .map(|name| {
                    LayerKind::from_name(name.trim()).ok_or_else(|| {
                        let known: Vec<_> = LayerKind::ALL.iter().map(|k| k.name()).collect();
                        StackSpecError::UnknownLayer(name.trim().to_string(), known.join(", "))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let reasons = layers.iter().map(|&k| (k, "named in the layer list".to_string())).collect();
            return Ok((StackSpec::from_layers(layers)?, reasons));
        }
        let mut properties = Vec::new();
        for word in text.split(['+', ',']).map(str::trim).filter(|w| !w.is_empty()) {
            // Presets are lower case and properties capitalized (`total` is vsync + `Total`, as in
            // Ensemble): an exact property name is the property, else a preset in any case.
            if let Some(prop) = Property::ALL.iter().find(|p| p.name() == word) {
                properties.push(*prop);
            } else if let Some((_, props, _)) = PRESETS.iter().find(|(name, _, _)| name.eq_ignore_ascii_case(word)) {
                properties.extend_from_slice(props);
            } else if let Some(prop) = Property::ALL.iter().find(|p| p.name().eq_ignore_ascii_case(word)) {
                properties.push(*prop);
            } else {
                let mut known: Vec<_> = PRESETS.iter().map(|(name, _, _)| *name).collect();
                known.extend(Property::ALL.iter().map(|p| p.name()));
                return Err(StackSpecError::UnknownProperty(word.to_string(), known.join(", ")));
            }
        }
        let reasons = StackSpec::choose_explained(&properties)?;
        let spec = StackSpec::from_layers(reasons.iter().map(|(k, _)| *k).collect())?;
        Ok((spec, reasons))
    }

    /// The stack providing `properties`, with the reason each layer was chosen.
    pub fn choose_explained(properties: &[Property]) -> Result<Vec<(LayerKind, String)>, StackSpecError> {
        let mut chosen: Vec<(LayerKind, String)> = BASE.iter().map(|(kind, why)| (*kind, (*why).to_string())).collect();
        for property in properties {
            for &kind in property.layers() {
                if !chosen.iter().any(|(k, _)| *k == kind) {
                    chosen.push((kind, format!("property {}", property.name())));
                }
            }
        }
        // Canonical order: the registry lists layers top to bottom (thesis Fig 2.3).
        chosen.sort_by_key(|(kind, _)| LayerKind::ALL.iter().position(|k| k == kind));
        StackSpec::from_layers(chosen.iter().map(|(k, _)| *k).collect())?;
        Ok(chosen)
    }

    /// The stack providing `properties`.
    pub fn choose(properties: &[Property]) -> Result<StackSpec, StackSpecError> {
        let chosen = StackSpec::choose_explained(properties)?;
        StackSpec::from_layers(chosen.into_iter().map(|(k, _)| k).collect())
    }

    /// Validates an explicit layer list: `top` first, `bottom` last, one `appl`, no duplicates,
    /// and every layer's requirements met by the layers below (or above) it.
    pub fn from_layers(layers: Vec<LayerKind>) -> Result<StackSpec, StackSpecError> {
        let names = || layers.iter().map(|k| k.name()).collect::<Vec<_>>().join(":");
        if layers.first() != Some(&LayerKind::Top) || layers.last() != Some(&LayerKind::Bottom) {
            return Err(StackSpecError::Ends(names()));
        }
        for (i, kind) in layers.iter().enumerate() {
            if layers[..i].contains(kind) {
                return Err(StackSpecError::Duplicate(kind.name()));
            }
        }
        if !layers.contains(&LayerKind::Appl) {
            return Err(StackSpecError::NoAppl);
        }
        // One ordering discipline per stack: each lowers the application's casts to plain reliable
        // ones below itself, so a second would see nothing to order.
        let ordering: Vec<&'static str> = layers
            .iter()
            .filter(|k| {
                let provides = k.spec().provides;
                [Service::TotalOrder, Service::CausalOrder, Service::SafeDelivery].iter().any(|s| provides.contains(s))
            })
            .map(|k| k.name())
            .collect();
        if let [first, second, ..] = ordering[..] {
            return Err(StackSpecError::Conflict(first, second));
        }
        let provided =
            |range: &[LayerKind], service: Service| range.iter().any(|k| k.spec().provides.contains(&service));
        for (i, kind) in layers.iter().enumerate() {
            let spec = kind.spec();
            for &service in spec.requires_below {
                if !provided(&layers[i + 1..], service) {
                    return Err(StackSpecError::Missing { layer: spec.name, service, below: true });
                }
            }
            for &service in spec.requires_above {
                if !provided(&layers[..i], service) {
                    return Err(StackSpecError::Missing { layer: spec.name, service, below: false });
                }
            }
            // Placement: no provider of an `above_every` service above this layer, none of a
            // `below_every` one below it.
            let misplaced = |range: &[LayerKind], services: &[Service]| {
                range
                    .iter()
                    .find_map(|k| services.iter().find(|s| k.spec().provides.contains(s)).map(|&s| (k.name(), s)))
            };
            if let Some((other, service)) = misplaced(&layers[..i], spec.above_every) {
                return Err(StackSpecError::Order { layer: spec.name, other, service, above: true });
            }
            if let Some((other, service)) = misplaced(&layers[i + 1..], spec.below_every) {
                return Err(StackSpecError::Order { layer: spec.name, other, service, above: false });
            }
        }
        Ok(StackSpec { layers: layers.into() })
    }

    /// The layers, top to bottom.
    pub fn layers(&self) -> &[LayerKind] {
        &self.layers
    }

    /// What this stack's layers provide that `other`'s do not, described (total order, safe
    /// delivery...), in `Service`'s order: what a member configured with this stack loses when it
    /// runs a view of `other` (a merge into a partition running it takes its stack).
    pub fn lacks(&self, other: &StackSpec) -> Vec<&'static str> {
        let provided = |spec: &StackSpec| {
            let mut services: Vec<Service> = spec.layers.iter().flat_map(|k| k.spec().provides).copied().collect();
            services.sort();
            services.dedup();
            services
        };
        let theirs = provided(other);
        provided(self).into_iter().filter(|s| !theirs.contains(s)).map(Service::describe).collect()
    }
}

impl fmt::Display for StackSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.layers.iter().map(|k| k.name()).collect();
        f.write_str(&names.join(":"))
    }
}

impl fmt::Debug for StackSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StackSpec({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_preset_is_the_ensemble_order() {
        let spec = StackSpec::parse("fifo").unwrap();
        assert_eq!(spec.to_string(), "top:stable:appl:local:frag:pt2ptw:mflow:pt2pt:mnak:bottom");
        assert_eq!(StackSpec::parse("Frag+Flow+Local").unwrap(), spec);
        assert_eq!(StackSpec::parse(&spec.to_string()).unwrap(), spec);
    }

    /// Nothing named is an error, not the bare base stack (`--stack "$UNSET"`: a review's
    /// finding).
    #[test]
    fn an_empty_stack_is_an_error() {
        for text in ["", "  ", "+", ",", ":", " + , "] {
            assert_eq!(StackSpec::parse(text), Err(StackSpecError::Empty), "`{text}`");
        }
        assert!(StackSpecError::Empty.to_string().contains("vsync"));
    }

    #[test]
    fn issue_example_layer_list_builds() {
        // The example list of issue 2 lacks `stable`, which `mnak` needs above it to free buffers.
        let err = StackSpec::parse("top:appl:frag:pt2ptw:mflow:pt2pt:mnak:bottom").unwrap_err();
        assert_eq!(err, StackSpecError::Missing { layer: "mnak", service: Service::Stability, below: false });
        StackSpec::parse("top:stable:appl:frag:pt2ptw:mflow:pt2pt:mnak:bottom").unwrap();
    }

    #[test]
    fn ordering_presets_and_their_conflict() {
        let total = StackSpec::parse("total").unwrap().to_string();
        assert!(total.contains("appl:sequencer:local"), "{total}");
        // `causal` names a preset and a layer: the word alone is the preset.
        let causal = StackSpec::parse("causal").unwrap().to_string();
        assert!(causal.contains("appl:causal:local") && causal.starts_with("top:"), "{causal}");
        assert_eq!(StackSpec::parse("vsync+Total+Causal"), Err(StackSpecError::Conflict("sequencer", "causal")));
        assert!(StackSpec::parse("safe").unwrap().to_string().contains("appl:safe:local"));
        assert_eq!(StackSpec::parse("vsync+Agree+Total"), Err(StackSpecError::Conflict("sequencer", "safe")));
        assert_eq!(StackSpec::parse("vsync+Total+Token"), Err(StackSpecError::Conflict("sequencer", "totem")));
        assert!(StackSpec::parse("vsync+Token").unwrap().to_string().contains("appl:totem:local"));
        // Ordering needs a view-change flush above it.
        assert!(matches!(
            StackSpec::parse("fifo+Total"),
            Err(StackSpecError::Missing { layer: "sequencer", service: Service::Flush, below: false })
        ));
        // And the flush needs membership above it, which runs its rounds: `Sync+Total` without
        // `Gmp` was accepted, and a failed sequencer's group then waited for ever.
        assert!(matches!(
            StackSpec::parse("fifo+Sync+Total"),
            Err(StackSpecError::Missing { layer: "sync", service: Service::Membership, below: false })
        ));
        assert!(StackSpec::parse("fifo+Sync+Total+Gmp+Suspect").is_ok());
    }

    #[test]
    fn missing_service_names_layer_and_service() {
        let err = StackSpec::parse("top:appl:frag:bottom").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`frag`") && text.contains("reliable FIFO"), "{text}");
        assert!(matches!(StackSpec::parse("top:appl:mnak"), Err(StackSpecError::Ends(_))));
        assert!(matches!(StackSpec::parse("top:bottom"), Err(StackSpecError::NoAppl)));
        assert!(matches!(StackSpec::parse("top:appl:appl:bottom"), Err(StackSpecError::Duplicate("appl"))));
        assert!(matches!(StackSpec::parse("top:nope:bottom"), Err(StackSpecError::UnknownLayer(..))));
        assert!(matches!(StackSpec::parse("Fifo+Wings"), Err(StackSpecError::UnknownProperty(..))));
        // The smallest valid stack: an unreliable one.
        assert_eq!(StackSpec::parse("top:appl:bottom").unwrap().layers().len(), 3);
    }

    /// What a member configured with one stack loses running another's view: the services only
    /// its own provides.
    #[test]
    fn lacks_names_what_the_other_stack_does_not_provide() {
        let spec = |text| StackSpec::parse(text).unwrap();
        assert_eq!(spec("total").lacks(&spec("vsync")), vec![Service::TotalOrder.describe()]);
        assert!(spec("vsync").lacks(&spec("total")).is_empty());
        assert!(spec("vsync").lacks(&spec("vsync")).is_empty());
        let lost = spec("vsync+Primary").lacks(&spec("fifo"));
        assert!(lost.contains(&Service::PrimaryPartition.describe()) && lost.contains(&Service::Membership.describe()));
    }
}
