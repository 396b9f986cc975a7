//! Unit tests of `hook::signature`: each scheme's signatures, freshness and rule equality.

use super::*;

fn rule(scheme: Scheme, secrets: &[&str]) -> SignatureRule {
    SignatureRule {
        secrets: secrets
            .iter()
            .map(|s| decode_secret(&scheme, s).unwrap())
            .collect(),
        scheme,
        tolerance: DEFAULT_TOLERANCE,
        token_accepted: true,
        retired: None,
    }
}

#[test]
fn a_rule_checks_as_another_with_the_same_scheme_secrets_and_tolerance() {
    let github = rule(Scheme::Github, &["a", "b"]);
    let token_refused = SignatureRule {
        token_accepted: false,
        ..github.clone()
    };
    assert!(
        github.checks_as(&token_refused),
        "the token is no part of it"
    );
    assert!(!github.checks_as(&rule(Scheme::Github, &["a"])));
    assert!(!github.checks_as(&rule(Scheme::Shopify, &["a", "b"])));
    let stricter = SignatureRule {
        tolerance: Duration::from_secs(1),
        ..github.clone()
    };
    assert!(!github.checks_as(&stricter));
}

fn headers(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// GitHub's documented example: secret "It's a Secret to Everybody", payload "Hello, World!".
#[test]
fn github_documented_vector() {
    let rule = rule(Scheme::Github, &["It's a Secret to Everybody"]);
    let h = headers(&[(
        "x-hub-signature-256",
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    )]);
    // The body's digest names the delivery: GitHub's delivery header is not signed.
    let digest = "dffd6021bb2bd5b0af676290809ec3a53191dd81c7f70a4b28688a362182986f";
    assert_eq!(
        verify(&rule, "gh", &h, b"Hello, World!", 0),
        Ok(AdmittingSignature {
            mapping_id: "gh".into(),
            scheme: "github".into(),
            replay_key: Some(format!("gh:{digest}")),
            secret: Some(SecretUsed::Current),
        })
    );
    assert_eq!(
        verify(&rule, "gh", &h, b"Hello, World?", 0),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn hostile_timestamps_do_not_panic() {
    for ts in [
        "9223372036854775807",
        "-9223372036854775808",
        "99999999999999999999999",
        "",
        "1e9",
        " 12 ",
    ] {
        let _ = fresh(ts, i64::MIN, DEFAULT_TOLERANCE);
        let _ = fresh(ts, i64::MAX, DEFAULT_TOLERANCE);
    }
    assert_eq!(fresh("100", 400, DEFAULT_TOLERANCE), Ok(()));
    assert_eq!(
        fresh("100", 401, DEFAULT_TOLERANCE),
        Err(SignatureError::Stale)
    );
    assert_eq!(
        fresh("701", 400, DEFAULT_TOLERANCE),
        Err(SignatureError::Stale)
    );
}

#[test]
fn stripe_header_parsing() {
    let (ts, sigs) = parse_stripe("t=12,v1=00ff,v0=zz,v1=0a").unwrap();
    assert_eq!((ts.as_str(), sigs.len()), ("12", 2));
    assert!(parse_stripe("v1=00").is_err());
    assert!(parse_stripe("t=1").is_err());
    assert!(parse_stripe("t=1,v1=nothex").is_err());
}

#[test]
fn whsec_secrets_must_be_base64() {
    assert!(
        decode_secret(
            &Scheme::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        )
        .is_some()
    );
    assert!(
        decode_secret(
            &Scheme::StandardWebhooks,
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        )
        .is_none()
    );
    assert!(decode_secret(&Scheme::StandardWebhooks, "whsec_***").is_none());
    assert!(decode_secret(&Scheme::Github, "").is_none());
}

#[test]
fn debug_never_prints_secrets() {
    let rule = rule(Scheme::Shopify, &["hush-hush"]);
    assert!(!format!("{rule:?}").contains("hush"));
}

/// Any header value, however odd, gives an answer and never a panic.
#[test]
fn parsers_survive_arbitrary_input() {
    let samples = [
        "",
        ",",
        "=",
        "t=",
        "v1=",
        "sha256=",
        "v0=",
        "v1,",
        "v1,!!!",
        "t=1,v1=",
        "\u{0}",
        "t=-1,v1=00",
        "sha256=zz",
        "🦀=🦀",
    ];
    for scheme in [
        Scheme::Github,
        Scheme::Stripe,
        Scheme::Slack,
        Scheme::StandardWebhooks,
        Scheme::Shopify,
        Scheme::Gitlab,
    ] {
        let rule = SignatureRule {
            scheme: scheme.clone(),
            secrets: vec![b"k".to_vec()],
            tolerance: DEFAULT_TOLERANCE,
            token_accepted: true,
            retired: None,
        };
        for value in samples {
            let h = move |_: &str| Some(value.to_string());
            assert!(
                verify(&rule, "m", &h, b"body", 0).is_err(),
                "{scheme:?} accepted {value:?}"
            );
        }
    }
}

/// A rotated-out secret verifies (as `Previous`) until its time, then is refused as expired;
/// the secret in force verifies as `Current`; neither lets another secret in.
#[test]
fn a_retired_secret_verifies_until_its_window_closes() {
    let mut rule = rule(Scheme::Github, &["new"]);
    rule.retired = Some(RetiredSecret {
        secret: b"old".to_vec(),
        until_unix: 1_000,
    });
    let signed = |secret: &[u8]| {
        let value = format!("sha256={}", hex::encode(mac(secret, &[b"body"])));
        move |name: &str| (name == "x-hub-signature-256").then(|| value.clone())
    };
    let used = |secret: &[u8], now| {
        verify(&rule, "gh", &signed(secret), b"body", now).map(|a| a.secret.unwrap())
    };
    assert_eq!(used(b"new", 2_000), Ok(SecretUsed::Current));
    assert_eq!(used(b"old", 999), Ok(SecretUsed::Previous));
    assert!(matches!(
        used(b"old", 1_000),
        Err(SignatureError::Expired(_))
    ));
    assert_eq!(used(b"other", 999), Err(SignatureError::Mismatch));

    let mut gitlab = self::rule(Scheme::Gitlab, &["new"]);
    gitlab.retired = rule.retired.clone();
    let token =
        |t: &'static str| move |name: &str| (name == "x-gitlab-token").then(|| t.to_string());
    assert_eq!(
        verify(&gitlab, "gl", &token("old"), b"", 999).map(|a| a.secret.unwrap()),
        Ok(SecretUsed::Previous)
    );
    assert!(matches!(
        verify(&gitlab, "gl", &token("old"), b"", 1_000),
        Err(SignatureError::Expired(_))
    ));
}

#[test]
fn outbound_signatures_match_the_standard_webhooks_test_vector() {
    // The vector of the Standard Webhooks reference libraries' tests.
    let secret = decode_secret(
        &Scheme::StandardWebhooks,
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )
    .unwrap();
    let body = br#"{"test": 2432232314}"#;
    let signed = standard_webhooks_signature(
        std::slice::from_ref(&secret),
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        body,
    );
    assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    let rotated = standard_webhooks_signature(&[secret.clone(), secret], "m", 1, b"{}");
    assert_eq!(rotated.split(' ').count(), 2);
}
