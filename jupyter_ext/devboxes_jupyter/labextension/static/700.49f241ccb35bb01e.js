"use strict";(self.rspackChunkdevboxes_jupyter=self.rspackChunkdevboxes_jupyter||[]).push([[700],{646(e,t,r){var o=r(601),n=r.n(o),a=r(314),s=(r.n(a))()(n());s.push([e.id,`.jp-Devboxes-panel {
  padding: 16px 24px;
  overflow: auto;
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color1);
}

.jp-Devboxes-form {
  display: flex;
  flex-direction: column;
  gap: 8px;
  max-width: 480px;
}

.jp-Devboxes-field {
  display: grid;
  grid-template-columns: 180px 1fr;
  align-items: center;
  gap: 8px;
}

.jp-Devboxes-help {
  color: var(--jp-ui-font-color2);
  margin-left: 188px;
  min-height: 1em;
}

.jp-Devboxes-form button {
  align-self: flex-start;
  margin-left: 188px;
}

.jp-Devboxes-error {
  color: var(--jp-error-color1);
  white-space: pre-wrap;
}

.jp-Devboxes-list {
  list-style: none;
  padding: 0;
  margin-top: 16px;
}

.jp-Devboxes-list li {
  display: flex;
  flex-direction: column;
  gap: 2px;
  padding: 6px 0;
  border-bottom: 1px solid var(--jp-border-color2);
}

.jp-Devboxes-list li[data-state='degraded'] .jp-Devboxes-status {
  color: var(--jp-error-color1);
}

.jp-Devboxes-list li[data-state='ready'] .jp-Devboxes-status {
  color: var(--jp-success-color1);
}
`,""]),r.d(t,{},{A:s})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",o=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),o&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),o&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,o,n,a){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(o)for(var i=0;i<this.length;i++){var c=this[i][0];null!=c&&(s[c]=!0)}for(var p=0;p<e.length;p++){var l=[].concat(e[p]);o&&s[l[0]]||(void 0!==a&&(void 0===l[5]||(l[1]="@layer".concat(l[5].length>0?" ".concat(l[5]):""," {").concat(l[1],"}")),l[5]=a),r&&(l[2]&&(l[1]="@media ".concat(l[2]," {").concat(l[1],"}")),l[2]=r),n&&(l[4]?(l[1]="@supports (".concat(l[4],") {").concat(l[1],"}"),l[4]=n):l[4]="".concat(n)),t.push(l))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,o=0;o<t.length;o++)if(t[o].identifier===e){r=o;break}return r}function o(e,o){for(var n={},a=[],s=0;s<e.length;s++){var i=e[s],c=o.base?i[0]+o.base:i[0],p=n[c]||0,l="".concat(c," ").concat(p);n[c]=p+1;var u=r(l),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==u)t[u].references++,t[u].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,o);o.byIndex=s,t.splice(s,0,{identifier:l,updater:f,references:1})}a.push(l)}return a}e.exports=function(e,n){var a=o(e=e||[],n=n||{});return function(e){e=e||[];for(var s=0;s<a.length;s++){var i=r(a[s]);t[i].references--}for(var c=o(e,n),p=0;p<a.length;p++){var l=r(a[p]);0===t[l].references&&(t[l].updater(),t.splice(l,1))}a=c}}},659(e){var t={};e.exports=function(e,r){var o=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!o)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");o.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var o,n,a;o="",r.supports&&(o+="@supports (".concat(r.supports,") {")),r.media&&(o+="@media ".concat(r.media," {")),(n=void 0!==r.layer)&&(o+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),o+=r.css,n&&(o+="}"),r.media&&(o+="}"),r.supports&&(o+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(o+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(o,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},959(e,t,r){var o=r(72),n=r.n(o),a=r(825),s=r.n(a),i=r(659),c=r.n(i),p=r(56),l=r.n(p),u=r(540),d=r.n(u),f=r(113),v=r.n(f),m=r(646),x={};x.styleTagTransform=v(),x.setAttributes=l(),x.insert=c().bind(null,"head"),x.domAPI=s(),x.insertStyleElement=d(),n()(m.A,x),m.A&&m.A.locals&&m.A.locals}}]);