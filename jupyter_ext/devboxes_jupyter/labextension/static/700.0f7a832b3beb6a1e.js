"use strict";(self.rspackChunkdevboxes_jupyter=self.rspackChunkdevboxes_jupyter||[]).push([[700],{646(e,o,r){var t=r(601),a=r.n(t),n=r(314),p=(r.n(n))()(a());p.push([e.id,`/* Only JupyterLab's own variables, so light, dark and custom themes all apply. */
.jp-Devboxes-sidebar {
  display: flex;
  flex-direction: column;
  min-width: 240px;
  overflow: auto;
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
}

.jp-Devboxes-header {
  display: flex;
  align-items: center;
  justify-content: space-between;
  padding: 4px 8px 4px 12px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}

.jp-Devboxes-title {
  margin: 0;
  font-size: var(--jp-ui-font-size0);
  font-weight: 600;
  letter-spacing: 1px;
  text-transform: uppercase;
  color: var(--jp-ui-font-color1);
}

.jp-Devboxes-heading {
  display: flex;
  align-items: baseline;
  gap: 8px;
  min-width: 0;
}

.jp-Devboxes-user {
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  font-size: var(--jp-ui-font-size0);
  color: var(--jp-ui-font-color2);
}

.jp-Devboxes-user[hidden] {
  display: none;
}

.jp-Devboxes-form {
  display: flex;
  flex-direction: column;
  gap: 6px;
  padding: 8px 12px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}

.jp-Devboxes-form[hidden] {
  display: none;
}

.jp-Devboxes-field {
  display: flex;
  flex-direction: column;
  gap: 2px;
}

.jp-Devboxes-fieldLabel {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
}

.jp-Devboxes-input,
.jp-Devboxes-select {
  width: 100%;
  box-sizing: border-box;
  background: var(--jp-input-background);
  color: var(--jp-ui-font-color1);
  border: var(--jp-border-width) solid var(--jp-input-border-color);
}

.jp-Devboxes-help {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  min-height: 1em;
}

.jp-Devboxes-form > .jp-Button {
  align-self: flex-start;
}

.jp-Devboxes-error {
  color: var(--jp-error-color1);
  white-space: pre-wrap;
}

.jp-Devboxes-error:empty {
  display: none;
}

.jp-Devboxes-list,
.jp-Devboxes-kernels {
  list-style: none;
  margin: 0;
  padding: 0;
}

.jp-Devboxes-kernel {
  display: flex;
  flex-direction: column;
  gap: 2px;
  min-width: 0;
  padding: 6px 8px 6px 12px;
  background: var(--jp-layout-color2);
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}

.jp-Devboxes-kernelHead {
  display: flex;
  align-items: flex-start;
  justify-content: space-between;
  gap: 4px;
}

/* Failures quote paths and settings longer than the panel is wide: those alone may
   break inside, so the message always fits. */
.jp-Devboxes-kernelMessage {
  overflow-wrap: anywhere;
}

.jp-Devboxes-kernel[data-phase='failed'] {
  color: var(--jp-error-color1);
}

.jp-Devboxes-box {
  display: flex;
  flex-direction: column;
  gap: 2px;
  padding: 6px 8px 6px 4px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}

.jp-Devboxes-box:hover {
  background: var(--jp-layout-color2);
}

.jp-Devboxes-boxHead {
  display: flex;
  align-items: center;
  gap: 4px;
  min-width: 0;
}

.jp-Devboxes-toggle {
  padding: 0;
  min-width: 20px;
  height: 20px;
}

.jp-Devboxes-boxName {
  flex: 1 1 auto;
  min-width: 0;
  overflow-wrap: anywhere;
  font-weight: 600;
}

.jp-Devboxes-state {
  flex: 0 0 auto;
  padding: 0 6px;
  border-radius: var(--jp-border-radius);
  font-size: var(--jp-ui-font-size0);
  background: var(--jp-layout-color3);
  color: var(--jp-ui-font-color1);
}

.jp-Devboxes-box[data-state='ready'] .jp-Devboxes-state {
  background: var(--jp-success-color1);
  color: var(--jp-ui-inverse-font-color1);
}

.jp-Devboxes-box[data-state='starting'] .jp-Devboxes-state {
  background: var(--jp-warn-color1);
  color: var(--jp-ui-inverse-font-color1);
}

.jp-Devboxes-box[data-state='degraded'] .jp-Devboxes-state {
  background: var(--jp-error-color1);
  color: var(--jp-ui-inverse-font-color1);
}

.jp-Devboxes-facts {
  display: flex;
  flex-wrap: wrap;
  gap: 0 12px;
  padding-left: 24px;
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
}

/* The whole reason, wrapped between words: cut, it lost the free count and the place in
   line, the part that says how long the wait may be. */
.jp-Devboxes-reason {
  padding-left: 24px;
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  overflow-wrap: break-word;
}

.jp-Devboxes-reason:empty {
  display: none;
}

.jp-Devboxes-box[data-state='degraded'] .jp-Devboxes-reason {
  color: var(--jp-error-color1);
}

.jp-Devboxes-actions {
  display: flex;
  flex-wrap: wrap;
  gap: 2px;
  padding-left: 20px;
}

.jp-Devboxes-action {
  display: inline-flex;
  align-items: center;
  gap: 4px;
  width: auto;
  min-width: 0;
  height: 24px;
  padding: 0 6px;
  white-space: nowrap;
  flex: 0 0 auto;
}

.jp-Devboxes-actionIcon {
  display: inline-flex;
}

.jp-Devboxes-detail {
  margin: 4px 0 0 24px;
  padding: 4px 6px;
  white-space: pre-wrap;
  word-break: break-word;
  font-family: var(--jp-code-font-family);
  font-size: var(--jp-code-font-size);
  background: var(--jp-layout-color2);
  color: var(--jp-ui-font-color1);
  border-radius: var(--jp-border-radius);
}

.jp-Devboxes-empty {
  padding: 12px;
  color: var(--jp-ui-font-color2);
}

.jp-Devboxes-status {
  padding: 4px 12px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
  color: var(--jp-ui-font-color3);
  font-size: var(--jp-ui-font-size0);
}

.jp-Devboxes-status.jp-mod-stale {
  background: var(--jp-warn-color3);
  color: var(--jp-ui-font-color1);
  border-left: 4px solid var(--jp-warn-color1);
}

.jp-Devboxes-status.jp-mod-stale .jp-Devboxes-statusLine {
  font-weight: 600;
}

.jp-Devboxes-staleDetail {
  overflow-wrap: anywhere;
}

.jp-Devboxes-staleDetail:empty {
  display: none;
}

.jp-Devboxes-list.jp-mod-stale .jp-Devboxes-box {
  opacity: 0.6;
}

.jp-Devboxes-choices {
  display: flex;
  flex-direction: column;
  gap: 2px;
  margin: 0;
  padding: 0;
  border: none;
  min-width: 0;
}

.jp-Devboxes-choice {
  display: flex;
  align-items: flex-start;
  gap: 4px;
}

.jp-Devboxes-choice > input {
  flex: 0 0 auto;
  margin: 2px 0 0;
}

.jp-Devboxes-choiceLabel {
  min-width: 0;
  overflow-wrap: break-word;
}

.jp-Devboxes-choices:disabled .jp-Devboxes-choice {
  color: var(--jp-ui-font-color3);
}

.jp-Devboxes-clearFailures {
  align-self: flex-end;
  margin: 4px 8px;
}

/* A styled button's display would otherwise win over the hidden attribute. */
.jp-Devboxes-clearFailures[hidden] {
  display: none;
}

/* JupyterLab shows a kernel's start error in a <pre>, as one line however long: a devbox
   kernel's one sentence (and the paths it quotes) wraps inside the dialog instead. */
.jp-Dialog-body > div > pre:first-child {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
}

/* A cell run while its notebook's devbox kernel starts: what it waits for, or why it did not run. */
.jp-Devboxes-heldNote {
  margin: 2px 0 4px var(--jp-cell-prompt-width, 64px);
  padding: 2px 8px;
  font-family: var(--jp-code-font-family);
  font-size: var(--jp-code-font-size);
  background: var(--jp-warn-color3);
  border-left: 4px solid var(--jp-warn-color1);
  white-space: pre-wrap;
}

.jp-Devboxes-heldNote.jp-mod-failed {
  background: var(--jp-rendermime-error-background, var(--jp-error-color3));
  border-left-color: var(--jp-error-color1);
}

/* A server that serves several clusters: which one the sidebar shows, each box's
   cluster, and one line per cluster that did not answer. */
.jp-Devboxes-clusterBar {
  display: flex;
  align-items: center;
  gap: 8px;
  padding: 4px 8px 4px 12px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}

.jp-Devboxes-clusterBar[hidden] {
  display: none;
}

.jp-Devboxes-clusterBar > .jp-Devboxes-select {
  flex: 1 1 auto;
  min-width: 0;
  width: auto;
}

.jp-Devboxes-clusterLines {
  list-style: none;
  margin: 2px 0 0;
  padding: 0;
}

.jp-Devboxes-clusterLines:empty {
  display: none;
}

.jp-Devboxes-clusterLine,
.jp-Devboxes-clusterNote {
  margin: 2px 0;
  padding: 2px 6px;
  overflow-wrap: anywhere;
  color: var(--jp-ui-font-color1);
}

.jp-Devboxes-clusterLine {
  background: var(--jp-warn-color3);
  border-left: 4px solid var(--jp-warn-color1);
}

.jp-Devboxes-clusterNote {
  border-left: 4px solid var(--jp-border-color1);
  color: var(--jp-ui-font-color2);
}

.jp-Devboxes-cluster {
  flex: 0 1 auto;
  min-width: 0;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  padding: 0 6px;
  border: var(--jp-border-width) solid var(--jp-border-color1);
  border-radius: var(--jp-border-radius);
  font-size: var(--jp-ui-font-size0);
  color: var(--jp-ui-font-color2);
}

.jp-Devboxes-box.jp-mod-stale {
  opacity: 0.6;
}

.jp-Devboxes-created {
  color: var(--jp-ui-font-color2);
  overflow-wrap: break-word;
}

.jp-Devboxes-created:empty {
  display: none;
}

/* One cluster's count of a profile: moved to the next line whole, never split. */
.jp-Devboxes-clusterCount {
  display: inline-block;
}
`,""]),r.d(o,{},{A:p})},314(e){e.exports=function(e){var o=[];return o.toString=function(){return this.map(function(o){var r="",t=void 0!==o[5];return o[4]&&(r+="@supports (".concat(o[4],") {")),o[2]&&(r+="@media ".concat(o[2]," {")),t&&(r+="@layer".concat(o[5].length>0?" ".concat(o[5]):""," {")),r+=e(o),t&&(r+="}"),o[2]&&(r+="}"),o[4]&&(r+="}"),r}).join("")},o.i=function(e,r,t,a,n){"string"==typeof e&&(e=[[null,e,void 0]]);var p={};if(t)for(var i=0;i<this.length;i++){var s=this[i][0];null!=s&&(p[s]=!0)}for(var l=0;l<e.length;l++){var d=[].concat(e[l]);t&&p[d[0]]||(void 0!==n&&(void 0===d[5]||(d[1]="@layer".concat(d[5].length>0?" ".concat(d[5]):""," {").concat(d[1],"}")),d[5]=n),r&&(d[2]&&(d[1]="@media ".concat(d[2]," {").concat(d[1],"}")),d[2]=r),a&&(d[4]?(d[1]="@supports (".concat(d[4],") {").concat(d[1],"}"),d[4]=a):d[4]="".concat(a)),o.push(d))}},o}},601(e){e.exports=function(e){return e[1]}},72(e){var o=[];function r(e){for(var r=-1,t=0;t<o.length;t++)if(o[t].identifier===e){r=t;break}return r}function t(e,t){for(var a={},n=[],p=0;p<e.length;p++){var i=e[p],s=t.base?i[0]+t.base:i[0],l=a[s]||0,d="".concat(s," ").concat(l);a[s]=l+1;var c=r(d),v={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==c)o[c].references++,o[c].updater(v);else{var x=function(e,o){var r=o.domAPI(o);return r.update(e),function(o){o?(o.css!==e.css||o.media!==e.media||o.sourceMap!==e.sourceMap||o.supports!==e.supports||o.layer!==e.layer)&&r.update(e=o):r.remove()}}(v,t);t.byIndex=p,o.splice(p,0,{identifier:d,updater:x,references:1})}n.push(d)}return n}e.exports=function(e,a){var n=t(e=e||[],a=a||{});return function(e){e=e||[];for(var p=0;p<n.length;p++){var i=r(n[p]);o[i].references--}for(var s=t(e,a),l=0;l<n.length;l++){var d=r(n[l]);0===o[d].references&&(o[d].updater(),o.splice(d,1))}n=s}}},659(e){var o={};e.exports=function(e,r){var t=function(e){if(void 0===o[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}o[e]=r}return o[e]}(e);if(!t)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");t.appendChild(r)}},540(e){e.exports=function(e){var o=document.createElement("style");return e.setAttributes(o,e.attributes),e.insert(o,e.options),o}},56(e,o,r){e.exports=function(e){var o=r.nc;o&&e.setAttribute("nonce",o)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var o=e.insertStyleElement(e);return{update:function(r){var t,a,n;t="",r.supports&&(t+="@supports (".concat(r.supports,") {")),r.media&&(t+="@media ".concat(r.media," {")),(a=void 0!==r.layer)&&(t+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),t+=r.css,a&&(t+="}"),r.media&&(t+="}"),r.supports&&(t+="}"),(n=r.sourceMap)&&"u">typeof btoa&&(t+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(n))))," */")),e.styleTagTransform(t,o,e.options)},remove:function(){var e;null===(e=o).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,o){if(o.styleSheet)o.styleSheet.cssText=e;else{for(;o.firstChild;)o.removeChild(o.firstChild);o.appendChild(document.createTextNode(e))}}},959(e,o,r){var t=r(72),a=r.n(t),n=r(825),p=r.n(n),i=r(659),s=r.n(i),l=r(56),d=r.n(l),c=r(540),v=r.n(c),x=r(113),u=r.n(x),b=r(646),f={};f.styleTagTransform=u(),f.setAttributes=d(),f.insert=s().bind(null,"head"),f.domAPI=p(),f.insertStyleElement=v(),a()(b.A,f),b.A&&b.A.locals&&b.A.locals}}]);