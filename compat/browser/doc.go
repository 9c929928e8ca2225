// Package browser holds the web UI's tests in a real browser: Debian's
// chromium, driven headless by chromedp, against real agent processes.
// A module of its own, so that plugreg's go.mod does not carry chromedp.
package browser
