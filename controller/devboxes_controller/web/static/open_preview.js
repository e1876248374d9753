// The hand-off to a preview's own origin: post the one-minute code there at once. The
// button stays for a browser that runs no script.
document.getElementById("open-preview").submit();
