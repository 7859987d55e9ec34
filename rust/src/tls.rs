//! TLS (cargo feature `tls`): the CA a backend URL names, read once and handed to each
//! client library in its own form (redis-rs `TlsCertificates`, reqwest's root
//! certificates, a rustls `ClientConfig` for tokio-postgres). Without a CA every library
//! trusts the webpki roots (Mozilla's list); with one, only that CA. Certificates are
//! always checked, host name included.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::Error;

/// The PEM text of the CA file at `path` and its certificates (at least one).
///
/// Errors: [`Error::Config`] naming the file when it cannot be read or holds no
/// PEM certificate.
pub(crate) fn read_ca(path: &Path) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), Error> {
    let pem = std::fs::read(path).map_err(|e| {
        Error::Config(format!(
            "cannot read the CA certificate file {}: {e}",
            path.display()
        ))
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Config(format!(
                "the CA certificate file {} is not PEM: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "the CA certificate file {} holds no certificate (expected PEM \"-----BEGIN CERTIFICATE-----\")",
            path.display()
        )));
    }
    Ok((pem, certs))
}

/// The rustls connector tokio-postgres opens TLS connections with: trusting only the CA
/// at `ca` when given, else the webpki roots; aws-lc-rs as the crypto provider.
///
/// Errors: [`Error::Config`] for a CA file [`read_ca`] refuses or a certificate rustls
/// cannot take as a trust anchor.
#[cfg(feature = "postgres")]
pub(crate) fn pg_connector(
    ca: Option<&Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, Error> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in read_ca(path)?.1 {
                roots.add(cert).map_err(|e| {
                    Error::Config(format!(
                        "the CA certificate file {} holds a certificate rustls refuses: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("cannot set up TLS for PostgreSQL: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
