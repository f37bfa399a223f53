#!/usr/bin/env bash
# Headless Chrome and the chromedriver of the same build, for web-search and WebShop env runners,
# on the Ubuntu-based Ray images (their `chromium` package is a snap stub that cannot run in a
# container). Installs Chrome for Testing under /opt/chrome and links it as /usr/bin/chromium and
# /usr/bin/chromedriver, the paths memrl's browser settings use by default. The browser_env_runner
# node types of aws.yaml / gcp.yaml run it at setup, and the KubeRay image with
# --build-arg BROWSER=1; it does nothing where both commands already exist.
#   bash clusters/install_browser.sh                 # the current stable build
#   CHROME_VERSION=131.0.6778.85 bash clusters/install_browser.sh
set -euo pipefail

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

$SUDO apt-get update -qq
# The libraries Chrome needs on a minimal Ubuntu (no desktop), and the tools to fetch it.
$SUDO apt-get install -y -qq --no-install-recommends curl unzip ca-certificates fonts-liberation \
  libatk-bridge2.0-0 libatk1.0-0 libcups2 libdrm2 libgbm1 libgtk-3-0 libnspr4 libnss3 \
  libxcomposite1 libxdamage1 libxfixes3 libxkbcommon0 libxrandr2 xdg-utils
# libasound2 was renamed on Ubuntu 24.04.
$SUDO apt-get install -y -qq --no-install-recommends libasound2 \
  || $SUDO apt-get install -y -qq --no-install-recommends libasound2t64

BASE=https://storage.googleapis.com/chrome-for-testing-public
VERSION="${CHROME_VERSION:-$(curl -fsSL https://googlechromelabs.github.io/chrome-for-testing/LATEST_RELEASE_STABLE)}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for part in chrome chromedriver; do
  curl -fsSL -o "$TMP/$part.zip" "$BASE/$VERSION/linux64/$part-linux64.zip"
done
$SUDO mkdir -p /opt/chrome
$SUDO unzip -q -o "$TMP/chrome.zip" -d /opt/chrome
$SUDO unzip -q -o "$TMP/chromedriver.zip" -d /opt/chrome
$SUDO ln -sf /opt/chrome/chrome-linux64/chrome /usr/bin/chromium
$SUDO ln -sf /opt/chrome/chromedriver-linux64/chromedriver /usr/bin/chromedriver
/usr/bin/chromium --headless=new --no-sandbox --version
/usr/bin/chromedriver --version
