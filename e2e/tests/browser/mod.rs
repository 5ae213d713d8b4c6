//! What the browser tests share: child processes stopped with everything they started, ports,
//! a headless chromium session of its own per person, and a person's key made in their browser,
//! enrolled, and used to sign in.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// A child process, in a process group of its own, stopped with everything it started when
/// dropped (chromedriver's browsers too, even when the test fails before closing them).
pub(crate) struct Kill(Child);

impl Kill {
    pub(crate) fn spawn(cmd: &mut Command) -> Self {
        use std::os::unix::process::CommandExt as _;
        Self(cmd.process_group(0).spawn().unwrap())
    }
}

impl Drop for Kill {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn wait_for_port(port: u16, what: &str) {
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// chromedriver, started after checking chromium and it are installed; its port.
pub(crate) fn chromedriver() -> (Kill, u16) {
    let which = |c: &str| {
        Command::new("which")
            .arg(c)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    assert!(
        which("chromium") && which("chromedriver"),
        "chromium and chromedriver are missing: run scripts/setup-tests (Debian packages chromium, chromium-driver)"
    );
    let port = free_port();
    let driver = Kill::spawn(
        Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for_port(port, "chromedriver");
    (driver, port)
}

/// A headless chromium session of its own (its own cookies and storage: one person each).
pub(crate) async fn browser(driver: u16) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver}"))
        .await
        .expect(
            "chromedriver session (run scripts/setup-tests: Debian's chromium and chromium-driver)",
        )
}

/// Type `id` on `base`'s sign-in page.
async fn at_login(c: &Client, base: &str, id: &str) {
    c.goto(&format!("{base}/login")).await.unwrap();
    c.find(Locator::Id("approver"))
        .await
        .unwrap()
        .send_keys(id)
        .await
        .unwrap();
}

/// Have the browser make `id` a key of its own at `base`, as the person would; its public half
/// (hex), for an operator to enrol in the directory.
pub(crate) async fn make_key(c: &Client, base: &str, id: &str) -> String {
    at_login(c, base, id).await;
    c.find(Locator::Id("make-key"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let shown = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#enrol:not([hidden]) #public-key"))
        .await
        .unwrap();
    let public = shown.text().await.unwrap();
    assert_eq!(public.len(), 64, "an Ed25519 public key in hex: {public:?}");
    public
}

/// Sign `id` in at `base` with the key this browser holds for them, as the person would.
pub(crate) async fn sign_in(c: &Client, base: &str, id: &str) {
    at_login(c, base, id).await;
    c.find(Locator::Id("sign-in"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let who = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("who"))
        .await;
    assert_eq!(who.unwrap().text().await.unwrap(), id, "signed in as {id}");
}

/// What script in the page can learn of `id`'s key: whether the browser holds one, whether it
/// says it is extractable, whether exporting it in any format succeeded, and every value the
/// page's storage holds (IndexedDB aside), for the caller to check that no key is among them.
pub(crate) async fn what_script_reads_of_the_key(c: &Client, id: &str) -> serde_json::Value {
    const JS: &str = r#"
        const [id, done] = arguments;
        (async () => {
          const d = await new Promise((ok, fail) => {
            const r = indexedDB.open('interlock-keys', 1);
            r.onsuccess = () => ok(r.result);
            r.onerror = () => fail(r.error);
          });
          const held = await new Promise((ok, fail) => {
            const r = d.transaction('keys').objectStore('keys').get(id);
            r.onsuccess = () => ok(r.result);
            r.onerror = () => fail(r.error);
          });
          const exported = [];
          for (const format of ['pkcs8', 'jwk', 'raw']) {
            try {
              await crypto.subtle.exportKey(format, held.privateKey);
              exported.push(format);
            } catch (e) { /* refused, as it must be */ }
          }
          const storage = [];
          for (const s of [sessionStorage, localStorage]) {
            for (let i = 0; i < s.length; i++) storage.push(s.getItem(s.key(i)));
          }
          done({
            held: !!held,
            type: held && held.privateKey.type,
            extractable: held && held.privateKey.extractable,
            exported,
            storage,
            cookies: document.cookie,
          });
        })().catch((e) => done({ error: String(e) }));
    "#;
    c.execute_async(JS, vec![json!(id)]).await.unwrap()
}
